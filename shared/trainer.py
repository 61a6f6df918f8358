"""The federated loop: sample clients, train them locally, aggregate, evaluate, checkpoint.

One run = one resolved config, written to an output directory:

    config.yaml       the resolved config (and its run id)
    partition.csv     client-by-class sample counts
    metrics.jsonl     one JSON record per round
    metrics.json      the summary: final/best accuracy, curves, per-class accuracy, T(x%), and
                      on a dataset of domains (Office-Caltech-10) the accuracy on each domain
    checkpoint.pt     after every round (atomic); removed once the run completes
    model.pt          the final global model
"""
from __future__ import annotations

import copy
import json
import math
import os
import platform
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import SimpleQueue

import numpy as np
import torch
import torch.nn.functional as F
import yaml

from shared.batched import BatchedClients, dependent_clients_reason, unbatchable_reason
from shared.config import RunConfig, identity, run_id, to_dict
from shared.data import Split, atomic_save
from shared.fedavg import ClientUpdate, FedAvg
from shared.federation import Client, Federation, build_federation, derive_seed
from shared.methods import build_method
from shared.models import Net, build_model, count_parameters
from shared.partition import save_count_matrix


# Runs in threads of one process (shared/multirun.py) share torch's global generator: seeding it
# and drawing the initial weights from it happen under this lock.
GLOBAL_RNG = threading.Lock()


class Diverged(RuntimeError):
    """A local model's weights became NaN or infinite."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(cfg: RunConfig, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.trainer.amp)


def sample_clients(cfg: RunConfig, round: int) -> list[int]:
    n = cfg.partition.clients
    m = max(1, math.ceil(cfg.federation.participation * n - 1e-9))
    rng = np.random.default_rng([cfg.seed, round, 0x5A3])
    return sorted(rng.choice(n, m, replace=False).tolist())


@torch.no_grad()
def evaluate(model: Net, split: Split, federation: Federation, cfg: RunConfig) -> dict:
    """Accuracy (%), mean loss and per-class accuracy (%) on a whole split; on a dataset of
    domains also the accuracy (%) on each domain's part of the split."""
    was_training = model.training
    model.eval()
    k = federation.num_classes
    dataset = federation.dataset
    domains = dataset.groups if dataset.group_kind == "domain" and split.group is not None else []
    correct = torch.zeros(k, device=split.y.device)
    total = torch.zeros(k, device=split.y.device)
    domain_correct = torch.zeros(len(domains), device=split.y.device)
    domain_total = torch.zeros(len(domains), device=split.y.device)
    loss = torch.zeros((), device=split.y.device)
    for start in range(0, len(split), cfg.eval.batch_size):
        x = federation.augmenter.normalize(split.x[start:start + cfg.eval.batch_size])
        y = split.y[start:start + cfg.eval.batch_size]
        with autocast(cfg, federation.device):
            logits = model(x).float()
        loss += F.cross_entropy(logits, y, reduction="sum")
        right = logits.argmax(1) == y
        correct += torch.bincount(y[right], minlength=k)
        total += torch.bincount(y, minlength=k)
        if domains:
            domain = split.group[start:start + cfg.eval.batch_size]
            domain_correct += torch.bincount(domain[right], minlength=len(domains))
            domain_total += torch.bincount(domain, minlength=len(domains))
    model.train(was_training)
    per_class = (100 * correct / total.clamp(min=1)).tolist()
    result = {"acc": 100 * correct.sum().item() / len(split), "loss": loss.item() / len(split), "per_class_acc": per_class}
    if domains:
        result["domain_acc"] = dict(zip(domains, (100 * domain_correct / domain_total.clamp(min=1)).tolist()))
    return result


def local_optimizer(model: Net, loc) -> torch.optim.Optimizer:
    """local.optimizer: SGD with momentum (the CV protocols) or Adam (FedGKD's DistilBERT runs)."""
    if loc.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=loc.lr, weight_decay=loc.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=loc.lr, momentum=loc.momentum, weight_decay=loc.weight_decay)


def train_client(method: FedAvg, client: Client, model: Net, cfg: RunConfig, round: int) -> ClientUpdate:
    """Local training of one client from the model's current (global) weights."""
    loc = cfg.local
    model.train()
    optimizer = local_optimizer(model, loc)
    generator = torch.Generator(client.index.device).manual_seed(derive_seed(cfg.seed, round, client.id))
    method.start_client(client, model)
    steps, loss_sum = 0, torch.zeros((), device=client.index.device)
    for _ in range(loc.epochs):
        for x, y in client.batches(loc.batch_size, generator):
            with autocast(cfg, client.index.device):
                loss = method.local_loss(model, x, y, client)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if loc.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), loc.grad_clip)
            optimizer.step()
            loss_sum += loss.detach().float()
            steps += 1
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if not all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point()):
        raise Diverged(f"client {client.id} diverged in round {round + 1} (non-finite weights)")
    update = ClientUpdate(client.id, state, client.num_samples, steps, (loss_sum / max(steps, 1)).item())
    method.finish_client(client, model, update)
    return update


def batched_trainer(method: FedAvg, model: Net, federation: Federation, cfg: RunConfig) -> BatchedClients | None:
    """The batched trainer when `trainer.clients_per_step` asks for it and it covers this run;
    otherwise None, with a note on stderr saying why clients train one after another."""
    wanted = cfg.trainer.clients_per_step
    if wanted == 1:
        return None
    reason = unbatchable_reason(method, model, cfg)
    if reason:
        print(f"note: trainer.clients_per_step={wanted} does not apply: {reason}; clients train one after another",
              file=sys.stderr)
        return None
    return BatchedClients(method, model, federation, cfg, slots=min(wanted, len(sample_clients(cfg, 0))))


class ClientThreads:
    """Clients of a round trained at once in `trainer.client_threads` threads, each on a model
    of its own, with torch's CPU threads shared out among them. PyTorch's operators release
    the GIL, and a small model's operators use one core well but two poorly, so two clients on
    one core each beat one client on two. Each client's training is what the sequential loop
    does (its own generator, optimizer and model copy), so results equal it up to the rounding
    that torch's thread count may change."""

    def __init__(self, model: Net, threads: int):
        self.threads = threads
        self.models: SimpleQueue[Net] = SimpleQueue()
        for i in range(threads):
            self.models.put(model if i == 0 else copy.deepcopy(model))
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="client")

    def map(self, train_one, sampled: list[int], sizes: list[int]) -> list:
        """train_one(cid, model) for every sampled client, the largest first (so that no
        thread is left with a large client at the end), returned in the order of `sampled`."""
        cores = torch.get_num_threads()

        def on_a_free_model(cid):
            torch.set_num_threads(max(1, cores // self.threads))  # this client's share of the cores
            model = self.models.get()
            try:
                return train_one(cid, model)
            finally:
                self.models.put(model)

        largest_first = sorted(sampled, key=lambda cid: -sizes[cid])
        try:
            results = dict(zip(largest_first, self.pool.map(on_a_free_model, largest_first)))
        finally:
            torch.set_num_threads(cores)
        return [results[cid] for cid in sampled]


def client_threads(method: FedAvg, model: Net, cfg: RunConfig) -> ClientThreads | None:
    """trainer.client_threads > 1 and a method whose clients are independent: the threads;
    otherwise None, with a note on stderr when threads were asked for."""
    if cfg.trainer.client_threads == 1:
        return None
    reason = dependent_clients_reason(method, cfg)
    if reason:
        print(f"note: trainer.client_threads={cfg.trainer.client_threads} does not apply: {reason}; "
              f"clients train one after another", file=sys.stderr)
        return None
    return ClientThreads(model, min(cfg.trainer.client_threads, len(sample_clients(cfg, 0))))


def rounds_to_target(rounds: list[int], accs: list[float], target: float) -> int | None:
    """FedCAD's T(x%): the first evaluated round whose global accuracy reaches the target."""
    return next((r for r, a in zip(rounds, accs) if a >= target), None)


def summarize(history: list[dict], cfg: RunConfig, status: str, wall_time: float, extra: dict) -> dict:
    evaluated = [h for h in history if "global_acc" in h]
    rounds = [h["round"] for h in evaluated]
    accs = [h["global_acc"] for h in evaluated]
    return {
        "status": status,
        "run_id": run_id(cfg),
        "rounds_completed": len(history),
        "final_acc": accs[-1] if accs else None,
        "best_acc": max(accs) if accs else None,
        "eval_rounds": rounds,
        "global_acc": accs,
        "global_loss": [h["global_loss"] for h in evaluated],
        "local_acc": [h.get("local_acc") for h in evaluated],
        "per_class_acc": evaluated[-1]["per_class_acc"] if evaluated else None,
        "domain_acc": evaluated[-1].get("domain_acc") if evaluated else None,  # by domain name (Office-Caltech-10)
        "rounds_to_target": {f"{t:g}": rounds_to_target(rounds, accs, t) for t in cfg.eval.target_acc},
        "wall_time_s": wall_time,
        **extra,
    }


def record_failure(cfg: RunConfig, out_dir: str | Path, exc: BaseException) -> dict:
    """metrics.json for a run that raised: the table marks its cell instead of stopping."""
    summary = summarize([], cfg, f"failed: {type(exc).__name__}: {exc}", 0.0, {})
    write_json(summary, Path(out_dir) / "metrics.json")
    return summary


def write_json(obj, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def write_history(history: list[dict], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(h) + "\n" for h in history))
    os.replace(tmp, path)


def progress_bar(cfg: RunConfig, **kwargs):
    from tqdm.auto import tqdm

    return tqdm(disable=not (cfg.trainer.progress and sys.stderr.isatty()), dynamic_ncols=True, **kwargs)


def run(cfg: RunConfig, out_dir: str | Path) -> dict:
    """Run one config to completion (or continue it from its checkpoint); returns metrics.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rid = run_id(cfg)
    summary_path, ckpt_path = out / "metrics.json", out / "checkpoint.pt"
    if summary_path.exists():
        done = json.loads(summary_path.read_text())
        if done.get("run_id") == rid:
            return done
    (out / "config.yaml").write_text(yaml.safe_dump({"run_id": rid, **to_dict(cfg)}, sort_keys=False))

    device = resolve_device(cfg.trainer.device)
    if device.type == "cuda":  # cuDNN picks the fastest algorithm per shape (float rounding only)
        torch.backends.cudnn.benchmark = True
    federation = build_federation(cfg, device)
    save_count_matrix(federation.counts, federation.dataset.classes, out / "partition.csv")

    with GLOBAL_RNG:
        torch.manual_seed(cfg.seed)
        global_model = build_model(cfg.model.name, federation.num_classes, federation.input_shape[0],
                                   federation.input_shape[-1], cfg.model.projection_dim,
                                   text=federation.dataset.text, pretrained=cfg.model.pretrained).to(device)
    if cfg.trainer.channels_last:
        global_model = global_model.to(memory_format=torch.channels_last)
    local_model = copy.deepcopy(global_model)
    method = build_method(cfg, federation)
    batched = batched_trainer(method, local_model, federation, cfg)
    threads = client_threads(method, local_model, cfg) if batched is None else None
    if cfg.trainer.compile and batched is None:
        # CUDA graphs (reduce-overhead) pay where a step is many small kernels; the batched
        # trainer captures its own
        use_graphs = device.type == "cuda" and cfg.trainer.cuda_graphs
        local_model.compile(mode="reduce-overhead" if use_graphs else None)

    history: list[dict] = []
    elapsed = 0.0
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=False)
        if ckpt["identity"] != identity(cfg):
            raise RuntimeError(f"{ckpt_path} belongs to a different config; remove it or use another output directory")
        global_model.load_state_dict(ckpt["global"])
        method.load_state_dict(ckpt["method"])
        history, elapsed = ckpt["history"], ckpt["elapsed"]

    status = "completed"
    rounds = progress_bar(cfg, total=cfg.federation.rounds, initial=len(history), desc=f"run {rid[:8]}", unit="round")
    for round in range(len(history), cfg.federation.rounds):
        started = time.perf_counter()
        with GLOBAL_RNG:
            torch.manual_seed(derive_seed(cfg.seed, round))  # for any randomness of the method's own
        sampled = sample_clients(cfg, round)
        evaluate_now = (round + 1) % cfg.eval.every == 0 or round + 1 == cfg.federation.rounds
        method.prepare_round(round, global_model)
        global_state = {k: v.detach().clone() for k, v in global_model.state_dict().items()}

        updates, local_accs = [], []
        try:
            if batched is None:
                def train_and_test(cid: int, model: Net) -> tuple[ClientUpdate, float | None]:
                    model.load_state_dict(global_state)
                    update = train_client(method, federation.clients[cid], model, cfg, round)
                    test_local = evaluate_now and cfg.eval.local
                    return update, evaluate(model, federation.test, federation, cfg)["acc"] if test_local else None

                if threads is None:
                    results = [train_and_test(cid, local_model) for cid in
                               progress_bar(cfg, iterable=sampled, desc=f"round {round + 1}", unit="client", leave=False)]
                else:
                    results = threads.map(train_and_test, sampled, [c.num_samples for c in federation.clients])
                updates = [update for update, _ in results]
                local_accs = [acc for _, acc in results if acc is not None]
            else:
                for start in range(0, len(sampled), batched.slots):
                    group = [federation.clients[cid] for cid in sampled[start:start + batched.slots]]
                    trained = batched.train(group, global_model, round)
                    updates += trained
                    for update in trained if evaluate_now and cfg.eval.local else []:
                        local_model.load_state_dict(update.state)
                        local_accs.append(evaluate(local_model, federation.test, federation, cfg)["acc"])
        except Diverged as exc:
            status = f"diverged: {exc}"
            break
        method.aggregate(global_model, updates)

        record = {"round": round + 1, "clients": sampled,
                  "train_loss": float(np.mean([u.train_loss for u in updates]))}
        if evaluate_now:
            result = evaluate(global_model, federation.test, federation, cfg)
            record.update(global_acc=result["acc"], global_loss=result["loss"], per_class_acc=result["per_class_acc"])
            if "domain_acc" in result:
                record["domain_acc"] = result["domain_acc"]
            if local_accs:
                record.update(local_acc=float(np.mean(local_accs)), local_accs=local_accs)
            if not math.isfinite(result["loss"]):
                status = f"diverged: global model loss is {result['loss']} after round {round + 1}"
        record.update(method.round_metrics())
        record["seconds"] = time.perf_counter() - started
        elapsed += record["seconds"]
        history.append(record)

        atomic_save({"identity": identity(cfg), "global": global_model.state_dict(), "method": method.state_dict(),
                     "history": history, "elapsed": elapsed}, ckpt_path)
        write_history(history, out / "metrics.jsonl")
        rounds.update(1)
        if "global_acc" in record:
            rounds.set_postfix(acc=f"{record['global_acc']:.2f}")
        if status != "completed":
            break
    rounds.close()

    extra = {"num_parameters": count_parameters(global_model), "device": str(device),
             "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
             "client_samples": federation.counts.sum(1).tolist()}
    summary = summarize(history, cfg, status, elapsed, extra)
    atomic_save(global_model.state_dict(), out / "model.pt")
    write_json(summary, summary_path)
    ckpt_path.unlink(missing_ok=True)
    return summary
