"""Our trainer against the reference loop (benchmarks/reference.py), in one process, on the same
config and seed: seconds per round, training samples per second, the ratio, final accuracies.

    python -m benchmarks.speed CONFIG [key=value ...] [--rounds N] [--reference-rounds N] [--minutes M]
                               [--variants NAME ...] [--repeats N] [--peak-tflops X] [--out FILE]

CONFIG is one of CONFIGS: the papers' defaults (`fedssd`, `fedssd-noteacher`, `fedgkd`,
`resnet50`, real CIFAR through shared.data.datasets) and `cpu` (FedSSD's setting cut to CPU size). The
key=value overrides apply to every variant: `dataset=imagefolder dataset.path=cifar10-jpeg.zip`
for a local copy of CIFAR-10, `dataset=synthetic` (shaped like CIFAR) where there is no data,
`trainer.device=cpu`. `--reference-rounds` times fewer rounds of the reference than of ours
(its accuracy is then not comparable, and the JSON says so); seconds per round still are.

Variants: `reference`; `sequential` (our trainer in fp32, one client after another); `bf16`
(bf16 autocast and channels_last); `batched` (`trainer.clients_per_step` = clients per round,
fp32; CUDA graphs on CUDA) and `batched-bf16`; on the CPU `threads` (`trainer.client_threads` =
torch's CPU threads, each client on one; channels_last, fp32) and `threads-bf16`, and the CPU
campaign's choices (`cpu` and `cpu-fedavg`): `threads-nchw` (client threads in the default layout,
what `campaign train` runs on a CPU), `channels-last` (one client after another) and
`no-local-eval` (`eval.local=false`); channels_last and eval.local are part of a run's id, so
the campaign cannot take them for runs declared without them; for ResNet-50
`fp32` (our trainer in fp32 eager), `bf16` and `bf16-compile` (and torch.compile, CUDA graphs on
CUDA), and `batched` and `batched-bf16` (BatchNorm in the batched step). bf16 changes a run's
numbers beyond rounding (`trainer.amp` is part of its id); its accuracy should still agree
within seed noise. On CUDA with --peak-tflops (or a GPU in PEAK_BF16_TFLOPS) the script also
measures the local steps alone: achieved TFLOP/s and the fraction of the bf16 peak.

Rounds default to 5 (fewer where the config has fewer). The JSON (default
benchmarks/results/<config>-<device>.json) is rewritten after every variant, so a benchmark cut
off by a job's time limit keeps what it measured; `--minutes M` starts no variant after M
minutes and lists the ones left out. Ends with a table.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.reference import run_reference
from shared.config.dotted import deep_merge
from shared.config.schema import RunConfig
from shared.run import as_overrides
from shared.runs.numerics import resolve_device
from shared.targets.configs import load_config
from shared.targets.table_declarations import MOON_CIFAR10

FEDSSD = deep_merge(MOON_CIFAR10, {"method": {"name": "fedssd", "m_max": 0.01}, "aux": {"per_class": 64}})
FEDGKD = {  # papers/fedgkd/protocol.py's PROTOCOL at Dir(0.5), with FedGKD's defaults
    "dataset": {"name": "cifar10", "val_fraction": 0.1},
    "model": {"name": "resnet8"},
    "partition": {"kind": "dirichlet", "clients": 20, "beta": 0.5},
    "federation": {"rounds": 100, "participation": 0.2},
    "local": {"epochs": 20, "batch_size": 64, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-5},
    "method": {"name": "fedgkd"},
}
SMALL_MODEL_VARIANTS = ["reference", "sequential", "bf16", "batched", "batched-bf16"]
CPU_CAMPAIGN_VARIANTS = ["threads-nchw", "channels-last", "no-local-eval"]
CONFIGS = {
    "fedssd": (FEDSSD, SMALL_MODEL_VARIANTS),
    "fedssd-noteacher": (deep_merge(MOON_CIFAR10, {"method": {"name": "fedavg"}}), SMALL_MODEL_VARIANTS),
    "fedgkd": (FEDGKD, SMALL_MODEL_VARIANTS),
    # FedSSD's Table I column: ResNet-50 (BatchNorm) on CIFAR-100, 10 clients; FedAvg's loss
    "resnet50": (
        deep_merge(MOON_CIFAR10, {"dataset": {"name": "cifar100"}, "model": {"name": "resnet50"}}),
        ["reference", "fp32", "bf16", "bf16-compile", "batched", "batched-bf16"],
    ),
    # FedSSD's setting at CPU size: a stratified fifth of CIFAR-10 (10,000 images) and 3 rounds;
    # E=10 as in the paper, and every round tests the global and the 10 local models on all
    # 10,000 test images
    "cpu": (
        deep_merge(FEDSSD, {"dataset": {"train_subset": 10000}, "federation": {"rounds": 3}}),
        [*SMALL_MODEL_VARIANTS, "threads", "threads-bf16", *CPU_CAMPAIGN_VARIANTS],
    ),
    "cpu-fedavg": (
        deep_merge(MOON_CIFAR10, {"dataset": {"train_subset": 10000}, "federation": {"rounds": 3}}),
        ["sequential", "threads", *CPU_CAMPAIGN_VARIANTS],
    ),
}
VARIANT_OVERRIDES = {  # "batched" variants also set trainer.clients_per_step to the clients per round
    "sequential": [],
    "fp32": [],
    "bf16": ["trainer.amp=true", "trainer.channels_last=true"],
    "bf16-compile": ["trainer.amp=true", "trainer.channels_last=true", "trainer.compile=true"],
    "batched": [],
    "batched-bf16": ["trainer.amp=true"],
    "threads": ["trainer.channels_last=true"],
    "threads-bf16": ["trainer.amp=true", "trainer.channels_last=true"],
    "threads-nchw": [],
    "channels-last": ["trainer.channels_last=true"],
    "no-local-eval": ["eval.local=false"],
}
# Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) from NVIDIA's data sheets, by a
# substring of torch.cuda.get_device_name
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "A100": 312.0}


def variant_config(base: dict, overrides: list[str], variant: str) -> RunConfig:
    common = [*as_overrides(base), "trainer.progress=false", *overrides, *VARIANT_OVERRIDES.get(variant, [])]
    if variant.startswith("batched"):  # every client of a round in one step
        clients_per_round = load_config(None, common).clients_per_round
        common.append(f"trainer.clients_per_step={clients_per_round}")
    if variant.startswith("threads"):  # as many clients at once as torch has CPU threads
        common.append(f"trainer.client_threads={torch.get_num_threads()}")
    return load_config(None, common)


def epoch_samples(n: int, batch_size: int) -> int:
    """Samples a client trains per epoch (shared.data.federation.Client.epoch_length)."""
    return n - 1 if n > 1 and n % batch_size == 1 else n


def run_ours(cfg: RunConfig, rounds: int) -> dict:
    from shared.training import trainer

    cfg = copy.deepcopy(cfg)
    cfg.federation.rounds = rounds
    with tempfile.TemporaryDirectory() as out:
        summary = trainer.run(cfg, out)
        history = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
    sizes = summary["client_samples"]
    for record in history:
        record["samples"] = cfg.local.epochs * sum(
            epoch_samples(sizes[c], cfg.local.batch_size) for c in record["clients"]
        )
    return {"history": history, "final_acc": summary["final_acc"], "status": summary["status"]}


def summarise(result: dict) -> dict:
    history = result["history"]
    seconds = [h["seconds"] for h in history]
    samples = sum(h["samples"] for h in history)
    return {
        "rounds": len(history),
        "seconds_per_round": sum(seconds) / len(seconds),
        "seconds_per_round_after_first": statistics.mean(seconds[1:]) if len(seconds) > 1 else seconds[0],
        "samples_per_s": samples / sum(seconds),
        "total_s": sum(seconds),
        "final_acc": result["final_acc"],
        "global_acc": [h["global_acc"] for h in history],
    }


def local_step_throughput(cfg: RunConfig, peak_tflops: float | None) -> dict:
    """One client's local epoch alone, after a warm-up epoch: TFLOP/s achieved (FLOPs counted by
    torch's FlopCounterMode on one batch) and, given the peak, its fraction."""
    from torch.utils.flop_counter import FlopCounterMode

    from shared.data.federation import build_federation
    from shared.methods.registry import build_method
    from shared.models.registry import model_for
    from shared.runs.numerics import set_numerics
    from shared.runs.seeding import client_generator
    from shared.training.clients import compile_for_full_batches, train_client

    cfg = copy.deepcopy(cfg)
    cfg.local.epochs = 1
    device = resolve_device(cfg.trainer.device)
    set_numerics(device, cfg.trainer.deterministic)
    federation = build_federation(cfg, device)
    torch.manual_seed(cfg.seed)
    model = model_for(cfg, federation).to(device)
    if cfg.trainer.channels_last:
        model = model.to(memory_format=torch.channels_last)
    method = build_method(cfg, federation)
    method.prepare_round(0, model)
    client = max(federation.clients, key=lambda c: c.num_samples)

    x, y = next(client.batches(cfg.local.batch_size, client_generator(cfg.seed, 0, client.id, device)))
    counter = FlopCounterMode(display=False)
    with counter, torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.trainer.amp):
        method.local_loss(model, x, y, client).backward()
    flops_per_sample = counter.get_total_flops() / len(y)
    model.zero_grad(set_to_none=True)

    compiled = compile_for_full_batches(model, device, cfg.trainer.cuda_graphs) if cfg.trainer.compile else None
    train_client(method, client, model, cfg, 0, compiled)  # warm-up: compilation, cuDNN's algorithm search
    torch.cuda.synchronize(device)
    started = time.perf_counter()
    update = train_client(method, client, model, cfg, 1, compiled)
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    samples = epoch_samples(client.num_samples, cfg.local.batch_size)
    tflops = flops_per_sample * samples / seconds / 1e12
    return {
        "steps": update.num_steps,
        "samples": samples,
        "seconds": seconds,
        "gflop_per_sample": flops_per_sample / 1e9,
        "tflops": tflops,
        "peak_bf16_tflops": peak_tflops,
        "fraction_of_bf16_peak": tflops / peak_tflops if peak_tflops else None,
    }


def hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else platform.processor()
    )
    return f"{model}, {torch.get_num_threads()} threads"


DEFAULT_ROUNDS = 5  # enough for a steady s/round after the first (warm-up) round


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.speed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", choices=sorted(CONFIGS))
    parser.add_argument("overrides", nargs="*", help="key=value, applied to every variant")
    parser.add_argument(
        "--rounds", type=int, help=f"rounds of our trainer (default: {DEFAULT_ROUNDS}, or the config's if fewer)"
    )
    parser.add_argument("--reference-rounds", type=int, help="rounds of the reference (default: --rounds)")
    parser.add_argument("--variants", nargs="*", help="a subset of the config's variants")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run the variants this many times, alternating; report each one's median s/round",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        help="time budget: no variant starts once it is spent (one that started runs to its end); "
        "the JSON lists the variants left out",
    )
    parser.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak, for the local-step utilisation")
    parser.add_argument(
        "--out", help="JSON file (default: benchmarks/results/<config>-<device>.json), rewritten after every variant"
    )
    return parser.parse_args(argv)


def medians(repeats: dict[str, list[dict]]) -> dict[str, dict]:
    """Each variant's repeat nearest its median s/round, and, with a reference, the ratios."""
    results = {}
    for variant, runs in repeats.items():
        if not runs:
            continue
        per_round = [r["seconds_per_round"] for r in runs]
        results[variant] = {
            **min(runs, key=lambda r: abs(r["seconds_per_round"] - statistics.median(per_round))),
            "seconds_per_round": statistics.median(per_round),
            "seconds_per_round_repeats": per_round,
        }
    if "reference" in results:
        reference = results["reference"]
        for result in results.values():
            result["speedup_vs_reference"] = reference["seconds_per_round"] / result["seconds_per_round"]
            result["speedup_per_repeat"] = [
                a / b for a, b in zip(reference["seconds_per_round_repeats"], result["seconds_per_round_repeats"])
            ]
            result["accuracy_comparable"] = result["rounds"] == reference["rounds"]
    return results


def write_report(report: dict, out: Path) -> None:
    """Atomically, so that a benchmark killed at its time limit leaves the last whole report."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    os.replace(tmp, out)


def print_table(report: dict, rounds: int, repeats: int) -> None:
    print(
        f"\n{report['config']} on {report['hardware']} (torch {torch.__version__}), {rounds} rounds, "
        f"median of {repeats} repeat(s)\n"
    )
    print("| variant | s / round | samples / s | x reference | x reference per repeat | final acc (%) |")
    print("|---|---|---|---|---|---|")
    for variant, r in report["variants"].items():
        ratio = f"{r['speedup_vs_reference']:.2f}" if "speedup_vs_reference" in r else "-"
        per_repeat = ", ".join(f"{x:.2f}" for x in r.get("speedup_per_repeat", [])) or "-"
        acc = f"{r['final_acc']:.2f}" + ("" if r.get("accuracy_comparable", True) else f" ({r['rounds']} rounds)")
        print(
            f"| {variant} | {r['seconds_per_round']:.2f} | {r['samples_per_s']:.0f} | {ratio} | {per_repeat} | {acc} |"
        )
    for variant in report["skipped"]:
        print(f"| {variant} | not run: time budget spent | | | | |")
    for variant, s in report["local_steps"].items():
        fraction = f", {100 * s['fraction_of_bf16_peak']:.0f}% of the bf16 peak" if s["fraction_of_bf16_peak"] else ""
        print(f"local steps, {variant}: {s['tflops']:.1f} TFLOP/s{fraction}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    base, variants = CONFIGS[args.config]
    variants = args.variants or variants
    configs = {v: variant_config(base, args.overrides, v) for v in variants}
    first = next(iter(configs.values()))
    device = resolve_device(first.trainer.device)
    rounds = args.rounds or min(DEFAULT_ROUNDS, first.federation.rounds)
    out = Path(args.out or f"benchmarks/results/{args.config}-{device.type}.json")
    budget_spent = lambda: args.minutes is not None and time.perf_counter() - started > 60 * args.minutes  # noqa: E731
    report = {
        "config": args.config,
        "model": first.model.name,
        "overrides": args.overrides,
        "rounds": rounds,
        "variants": {},
        "skipped": [],
        "local_steps": {},
        "minutes": args.minutes,
        "hardware": hardware(device),
        "device": str(device),
        "torch": torch.__version__,
        "command": " ".join(
            [
                *(f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS",) if k in os.environ),
                "python -m benchmarks.speed",
                *(argv if argv is not None else sys.argv[1:]),
            ]
        ),
    }
    # On a shared machine the speed drifts over minutes; repeats alternate the variants, so that
    # each variant's median and each repeat's ratios see the same conditions.
    repeats: dict[str, list[dict]] = {v: [] for v in configs}
    for _ in range(args.repeats):
        for variant, cfg in configs.items():
            if budget_spent():
                break
            variant_started = time.perf_counter()
            if variant == "reference":
                result = run_reference(cfg, args.reference_rounds or rounds)
            else:
                result = run_ours(cfg, rounds)
            repeats[variant].append(summarise(result))
            print(
                f"{variant}: {repeats[variant][-1]['seconds_per_round']:.2f} s/round, "
                f"final acc {result['final_acc']:.2f} "
                f"({time.perf_counter() - variant_started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
            report.update(variants=medians(repeats), skipped=[v for v in configs if not repeats[v]])
            write_report(report, out)

    peak = args.peak_tflops or next(
        (v for k, v in PEAK_BF16_TFLOPS.items() if device.type == "cuda" and k in torch.cuda.get_device_name(device)),
        None,
    )
    if device.type == "cuda":
        for variant in [v for v in variants if v in ("fp32", "bf16", "bf16-compile") and not budget_spent()]:
            report["local_steps"][variant] = local_step_throughput(configs[variant], peak)
            write_report(report, out)
    report.update(variants=medians(repeats), skipped=[v for v in configs if not repeats[v]])
    write_report(report, out)
    print_table(report, rounds, args.repeats)
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
