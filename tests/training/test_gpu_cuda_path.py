"""The CUDA path's promises that only a GPU can show: same-seed runs and resumed runs (in a new
process too) bit-identical under trainer.deterministic, the numerics a run sets, augmentation on
the device, a CUDA graph captured and replayed, compile with uneven clients and local tests,
CUDA evaluation against the CPU's, memory that does not grow over rounds, per-client state off
the GPU, the `--gpu auto` job path, the device a `cuda:i` job selects, and benchmarks/speed.py.
Skipped without a GPU; tests/training/test_cuda_readiness.py shows on a CPU what can be shown there.

    python -m pytest -q -m gpu tests/training/test_gpu_cuda_path.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from shared.config.schema import run_id, to_dict
from shared.training import trainer
from tests.training.test_gpu import BASE, MODELS, history, make_cfg, relative_difference, train

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is false)"),
]
REPO = Path(__file__).resolve().parents[2]


def weights(out: Path) -> dict:
    return torch.load(out / "model.pt", map_location="cpu")


def set_up(cfg, folder: Path) -> trainer.Setup:
    """A run's setup (data, model, method, the way its clients train) without training it."""
    folder.mkdir(parents=True)
    return trainer.set_up(cfg)


def bitwise_equal(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


# --- determinism ------------------------------------------------------------------------------

# Each of these sums over samples or clients somewhere CUDA would otherwise sum with atomics or
# pick kernels by timing: FedCAD's and FedCSD's class sums, FedProto's class means, cuDNN's
# convolution algorithms (ResNet-8, AlexNet's pooling), the batched step in a CUDA graph.
DETERMINISTIC = {
    "fedavg": [],
    "fedcad": ["method=fedcad", "aux.per_class=5"],
    "fedcsd": ["method=fedcsd", "model=resnet8"],
    "fedproto": ["method=fedproto"],
    "fedgkd-batched-graphs": ["method=fedgkd", "model=resnet8", "trainer.clients_per_step=4"],
    "alexnet_bn": MODELS["alexnet_bn"],
    "scaffold": ["method=scaffold"],
    "moon": ["method=moon", "model.projection_dim=32"],
}


# the batched step in a CUDA graph is the campaign's path: the GPU session's gate runs that case
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=[pytest.mark.gate] if c == "fedgkd-batched-graphs" else []) for c in sorted(DETERMINISTIC)],
)
def test_the_same_seed_gives_bit_identical_weights_and_metrics(tmp_path, case):
    overrides = [*DETERMINISTIC[case], "federation.rounds=2"]
    first, a = train(tmp_path, "first", *overrides)
    second, b = train(tmp_path, "second", *overrides)
    assert bitwise_equal(a, b)
    assert first["global_acc"] == second["global_acc"] and first["global_loss"] == second["global_loss"]
    assert history(tmp_path / "first") == history(tmp_path / "second")


@pytest.mark.gate
def test_a_run_sets_deterministic_kernels_no_benchmarking_and_no_tf32(tmp_path):
    summary, _ = train(tmp_path, "run", "federation.rounds=1")
    numerics = summary["environment"]["numerics"]
    assert numerics["deterministic_algorithms"] and not numerics["cudnn_benchmark"]
    assert not numerics["tf32_matmul"] and not numerics["tf32_cudnn"]
    assert torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.allow_tf32
    fast, _ = train(tmp_path, "fast", "federation.rounds=1", "trainer.deterministic=false")
    assert (
        fast["environment"]["numerics"]["cudnn_benchmark"]
        and not fast["environment"]["numerics"]["deterministic_algorithms"]
    )
    assert fast["run_id"] == summary["run_id"]


@pytest.mark.gate
def test_sums_by_class_on_cuda_repeat_bit_for_bit_and_match_the_cpu():
    from shared.methods.class_sums import sum_by_class

    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 10, (4096,), generator=generator)
    values = torch.randn(4096, 10, generator=generator)
    on_cuda = [sum_by_class(values.cuda(), labels.cuda(), 10) for _ in range(5)]
    assert all(torch.equal(on_cuda[0], s) for s in on_cuda[1:])
    expected = torch.zeros(10, 10, dtype=torch.float64).index_add_(0, labels, values.double())
    assert torch.allclose(on_cuda[0].cpu().double(), expected, rtol=1e-5, atol=1e-4)


def test_alexnet_pooling_has_a_deterministic_backward_where_torchs_has_none():
    from shared.models.nets import AdaptiveAvgPool

    x = torch.randn(2, 4, 7, 7, device="cuda", requires_grad=True)
    before = torch.are_deterministic_algorithms_enabled()  # the tests after it keep what they found
    torch.use_deterministic_algorithms(True)
    try:
        grads = [torch.autograd.grad(AdaptiveAvgPool((6, 6))(x).sum(), x)[0] for _ in range(2)]
        assert torch.equal(grads[0], grads[1])
        with pytest.raises(RuntimeError, match="deterministic"):
            F.adaptive_avg_pool2d(x, (6, 6)).sum().backward()
    finally:
        torch.use_deterministic_algorithms(before)
    cpu = x.detach().cpu().double().requires_grad_()
    F.adaptive_avg_pool2d(cpu, (6, 6)).sum().backward()
    assert torch.allclose(grads[0].cpu().double(), cpu.grad, atol=1e-6)


# --- augmentation on the device -------------------------------------------------------------------


@pytest.mark.gate
@pytest.mark.parametrize("pad_mode", ["reflect", "constant"])
def test_augmentation_on_cuda_crops_and_flips_the_padded_image(pad_mode):
    from shared.data.federation import Augmenter

    images = torch.randint(0, 256, (64, 3, 8, 8), dtype=torch.uint8)
    augmenter = Augmenter((0.0,) * 3, (1 / 255,) * 3, True, torch.device("cuda"), pad=2, pad_mode=pad_mode)
    out = augmenter(images.cuda(), torch.Generator("cuda").manual_seed(0)).cpu()
    padded = F.pad(images.float(), (2, 2, 2, 2), mode=pad_mode)
    for image, original in zip(out, padded):
        windows = [original[:, i : i + 8, j : j + 8] for i in range(5) for j in range(5)]
        assert any(torch.equal(image, w) or torch.equal(image, w.flip(-1)) for w in windows)
    assert len({tuple(o.flatten()[:8].tolist()) for o in out}) > 16  # the crops vary


@pytest.mark.gate
def test_rotation_on_cuda_keeps_the_centre_and_blackens_corners():
    from shared.data.federation import Augmenter

    images = torch.full((32, 1, 16, 16), 200, dtype=torch.uint8, device="cuda")
    augmenter = Augmenter((0.0,), (1 / 255,), True, torch.device("cuda"), pad=0, max_rotation=30.0)
    out = augmenter(images, torch.Generator("cuda").manual_seed(1))
    assert (out[:, :, 6:10, 6:10] == 200).all()
    assert (out[:, :, 0, 0] == 0).float().mean() > 0.5  # most turned images leave a corner black


@pytest.mark.parametrize("augmentation", ["niid_bench", "feddf", "moon_cifar100"])
def test_runs_with_each_augmentation_train_on_cuda(tmp_path, augmentation):
    overrides = [f"dataset.augmentation=always:{augmentation}", "federation.rounds=1"]
    _, augmented = train(tmp_path, "augmented", *overrides)
    _, plain = train(tmp_path, "plain", "federation.rounds=1")
    assert relative_difference(plain, augmented) > 1e-4  # other samples: other weights


# --- CUDA graphs and compile -----------------------------------------------------------------------


def count_eager_steps(batched) -> list[int]:
    """Counts the eager (not replayed) runs of `batched.step` from now on: a capture runs it
    three times (two warm-up steps and the recorded one); a replayed step runs none."""
    calls = [0]
    step = batched.step

    def counted():
        calls[0] += 1
        step()

    batched.step = counted
    return calls


def train_batched(setup, clients: list[int], round: int) -> None:
    """One round's local training of these clients in the run's batched step, after the
    method's server-side step for the round (as the trainer's loop does)."""
    setup.method.prepare_round(round, setup.global_model)
    setup.clients.train([setup.federation.clients[c] for c in clients], setup.global_model, round, test_local=False)


@pytest.mark.gate
@pytest.mark.gate_capture
def test_the_batched_step_is_captured_once_and_replayed_across_calls_and_rounds(tmp_path):
    cfg = make_cfg(tmp_path, "trainer.clients_per_step=4")
    setup = set_up(cfg, tmp_path / "run")
    batched = setup.clients.clients
    clients = trainer.sample_clients(cfg, 0)
    train_batched(setup, clients, 0)
    graph = batched.graph
    assert isinstance(graph, torch.cuda.CUDAGraph)
    before = [p.clone() for p in batched.params]
    batched.sizes.fill_(cfg.local.batch_size)  # every client active: one replay is one SGD step of each
    graph.replay()
    torch.cuda.synchronize()
    assert all(not torch.equal(a, b) for a, b in zip(before, batched.params))
    eager = count_eager_steps(batched)
    train_batched(setup, clients, 0)
    train_batched(setup, trainer.sample_clients(cfg, 1), 1)
    # the same round again, and the next round: the same constants and layout, so the same
    # graph, and every step of both a replay of it
    assert batched.graph is graph and eager[0] == 0


@pytest.mark.gate
@pytest.mark.gate_capture
def test_the_batched_step_is_captured_again_when_a_shared_float_or_the_layout_changes(tmp_path):
    """MOON weights l_con by mu for a client with a previous model and by 0.0 for one without: a
    float every lane shares is a constant of the captured step, a float the lanes differ in a
    stack of its own (another layout of the step's state)."""
    cfg = make_cfg(
        tmp_path, "method=moon", "model.projection_dim=32", "partition.clients=6", "trainer.clients_per_step=4"
    )
    setup = set_up(cfg, tmp_path / "run")
    batched = setup.clients.clients
    assert batched.lanes == 4
    train_batched(setup, [0, 1, 2, 3], 0)  # no client has a previous model: 0.0 everywhere
    first, layout = batched.graph, batched.state.layout
    assert isinstance(first, torch.cuda.CUDAGraph) and ("contrast_weight", 0.0) in batched.graph_key[1]
    train_batched(setup, [0, 1, 2, 3], 1)  # each has one now: mu everywhere, the same layout
    second = batched.graph
    assert second is not first and batched.state.layout == layout
    assert ("contrast_weight", setup.method.params.mu) in batched.graph_key[1]
    eager = count_eager_steps(batched)
    train_batched(setup, [0, 1, 2, 3], 2)
    assert batched.graph is second and eager[0] == 0  # the constants held: replayed
    train_batched(setup, [2, 3, 4, 5], 3)  # two with a previous model, two without: a stack of weights
    assert batched.graph is not second and batched.state.layout != layout and eager[0] == 3
    assert "contrast_weight" in batched.state.stacked_floats
    assert all(key != "contrast_weight" for key, _ in batched.graph_key[1])


@pytest.mark.parametrize("graphs", ["true", "false"])
def test_compile_with_uneven_clients_and_local_tests_compiles_one_graph_and_gives_the_eager_weights(tmp_path, graphs):
    import torch._dynamo

    # Dirichlet clients of different sizes (ragged last batches), the test set in a ragged last
    # batch too, and every round tests the local models
    overrides = ["partition.beta=0.3", "local.batch_size=16", "eval.batch_size=96", "eval.local=true"]
    summary, eager = train(tmp_path, "eager", *overrides)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled_summary, compiled = train(
        tmp_path, "compiled", *overrides, "trainer.compile=true", f"trainer.cuda_graphs={graphs}"
    )
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # the full batch's shape alone
    assert relative_difference(eager, compiled) < 1e-4
    assert compiled_summary["local_acc"] == pytest.approx(summary["local_acc"], abs=5)


# --- evaluation, memory ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["fedavg_cnn", "resnet8", "alexnet_bn"])
@pytest.mark.usefixtures("no_tf32")
def test_cuda_evaluation_equals_cpu_evaluation_of_the_same_weights(tmp_path, model):
    """fp32 on both (cuDNN's convolutions take TF32 by default, whatever ran before this test)."""
    from shared.data.federation import build_federation
    from shared.models.registry import model_for
    from shared.training.evaluation import evaluate

    results = {}
    for device in ("cpu", "cuda"):
        cfg = make_cfg(tmp_path, *MODELS[model], f"trainer.device={device}")
        federation = build_federation(cfg, torch.device(device))
        torch.manual_seed(0)
        net = model_for(cfg, federation).to(device)
        results[device] = evaluate(net, federation.test, federation, cfg)
    assert abs(results["cuda"]["acc"] - results["cpu"]["acc"]) <= 100 / len(federation.test) + 1e-9  # one image
    assert results["cuda"]["loss"] == pytest.approx(results["cpu"]["loss"], rel=1e-4)


MEMORY = {
    "fedavg": [],
    "fedavg-batched": ["trainer.clients_per_step=4"],
    "moon": ["method=moon", "model.projection_dim=32"],
    "fedcurv": ["method=fedcurv"],
    "scaffold": ["method=scaffold"],
}


@pytest.mark.parametrize("case", sorted(MEMORY))
def test_gpu_memory_does_not_grow_over_rounds(tmp_path, monkeypatch, case):
    """Half the clients a round, so that per-client state would pile up on the GPU if it lived there."""
    from shared.runs.directory import RunDirectory

    allocated = []
    real = RunDirectory.save_round

    def save_round(self, history, state):
        real(self, history, state)
        torch.cuda.synchronize()
        allocated.append(torch.cuda.memory_allocated())

    monkeypatch.setattr(RunDirectory, "save_round", save_round)
    cfg = make_cfg(
        tmp_path, *MEMORY[case], "federation.rounds=6", "federation.participation=0.5", "partition.clients=8"
    )
    summary = trainer.run(cfg, tmp_path / case)
    # six rounds of this tiny federation may not leave chance (MOON's on the CPU does not), which
    # marks the run suspect (shared.runs.metrics.judge): how well it learns is not what this test measures
    assert summary["status"] == "completed" or summary["status"].startswith("suspect: final accuracy"), summary[
        "status"
    ]
    assert len(allocated) == 6
    assert max(allocated[2:]) <= allocated[1] + 2**20, [a / 2**20 for a in allocated]  # MiB after each round


@pytest.mark.parametrize("method, key", [("moon", "previous"), ("fedcurv", "u"), ("scaffold", "c_client")])
def test_per_client_state_stays_in_pinned_host_memory(tmp_path, method, key):
    extra = ["model.projection_dim=32"] if method == "moon" else []
    cfg = make_cfg(tmp_path, f"method={method}", *extra)
    setup = set_up(cfg, tmp_path / "run")
    clients = [setup.federation.clients[c] for c in trainer.sample_clients(cfg, 0)]
    setup.method.prepare_round(0, setup.global_model)
    results = setup.clients.train(clients, setup.global_model, 0, test_local=False)
    setup.method.aggregate(setup.global_model, [r.update for r in results])
    states = getattr(setup.method, key)
    tensors = [t for c in states for t in (states[c].values() if isinstance(states[c], dict) else states[c])]
    assert len(states) == len(clients) and tensors
    assert all(t.device.type == "cpu" and t.is_pinned() for t in tensors)


# --- resuming in a new process ----------------------------------------------------------------------

KILL_AFTER_ROUND_1 = """
import json, sys
from shared.training import trainer
from shared.targets.configs import load_config
from shared.run import as_overrides
from shared.runs.directory import RunDirectory

save_round = RunDirectory.save_round


def save_round_then_die(self, history, state):  # the process dies right after round 1's checkpoint
    save_round(self, history, state)
    if len(history) == 1:
        raise KeyboardInterrupt


RunDirectory.save_round = save_round_then_die
try:
    trainer.run(load_config(None, as_overrides(json.loads(sys.argv[1]))), sys.argv[2])
except KeyboardInterrupt:
    sys.exit(3)
"""


@pytest.mark.parametrize("case", ["fedgkd-batched-graphs", "moon", "scaffold", "fedcsd"])
def test_a_run_killed_and_resumed_in_new_processes_is_bit_identical_to_an_uninterrupted_one(tmp_path, case):
    overrides = [*DETERMINISTIC[case], "federation.rounds=3"]
    _, straight = train(tmp_path, "straight", *overrides)
    config = json.dumps(to_dict(make_cfg(tmp_path, *overrides)))
    killed = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_ROUND_1, config, str(tmp_path / "resumed")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert killed.returncode == 3, killed.stderr
    assert len(history(tmp_path / "resumed")) == 1 and (tmp_path / "resumed" / "checkpoint.pt").exists()
    resumed = subprocess.run(
        [sys.executable, "-m", "shared.run", "--json", config, "--out", str(tmp_path / "resumed")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert bitwise_equal(straight, weights(tmp_path / "resumed"))
    assert history(tmp_path / "straight") == history(tmp_path / "resumed")


# --- jobs: --gpu auto, cuda:i ----------------------------------------------------------------------


def test_a_job_with_gpu_auto_trains_on_a_gpu(tmp_path):
    cfg = make_cfg(tmp_path, "federation.rounds=1", "trainer.device=auto")
    configs = tmp_path / "configs.json"  # the workflow's run id -> config, as common.smk writes it
    configs.write_text(json.dumps({run_id(cfg): to_dict(cfg)}))
    out = tmp_path / "results" / "runs" / run_id(cfg)
    proc = subprocess.run(
        [sys.executable, "-m", "shared.workflow_job", "--gpu", "auto", "--configs", str(configs), "--runs", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["status"] == "completed" and summary["device"].startswith("cuda")
    if torch.cuda.device_count() > 1:  # a lock per GPU, held while the job ran
        assert list((tmp_path / "results" / ".gpu-locks").glob("*-0.lock"))


SELECTED = """
import sys, torch
from shared.run import main
code = main(sys.argv[1:])
print("current", torch.cuda.current_device())
import subprocess, os
used = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                      capture_output=True, text=True).stdout
print("apps", used.count(str(os.getpid())))
sys.exit(code)
"""


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="cuda:i against GPU 0 needs two GPUs"
)
def test_a_job_given_cuda_i_makes_it_the_current_device_and_opens_no_context_elsewhere(tmp_path):
    last = torch.cuda.device_count() - 1
    config = json.dumps(to_dict(make_cfg(tmp_path, "federation.rounds=1", f"trainer.device=cuda:{last}")))
    proc = subprocess.run(
        [sys.executable, "-c", SELECTED, "--json", config, "--out", str(tmp_path / "run")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"current {last}" in proc.stdout
    if "apps" in proc.stdout:  # where NVML lists processes
        assert "apps 1" in proc.stdout, proc.stdout  # one GPU holds a context of the process, not two


# --- the speed benchmark ---------------------------------------------------------------------------


def test_the_speed_benchmark_on_cuda_writes_every_variant(tmp_path):
    from benchmarks.speed import main

    out = tmp_path / "speed.json"
    tiny = [o for o in BASE if not o.startswith(("trainer.", "local.lr", "local.weight_decay"))]
    assert (
        main(
            [
                "fedssd",
                *tiny,
                "aux.per_class=5",
                f"data_root={tmp_path}",
                "--rounds",
                "2",
                "--variants",
                "sequential",
                "batched",
                "bf16",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["device"].startswith("cuda") and list(report["variants"]) == ["sequential", "batched", "bf16"]
    variants = report["variants"]
    assert all(v["rounds"] == 2 and v["seconds_per_round"] > 0 for v in variants.values())
    assert variants["batched"]["final_acc"] == pytest.approx(variants["sequential"]["final_acc"], abs=5)
