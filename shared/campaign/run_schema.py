"""The schema of a run's files as the trainer writes them (shared/training/trainer.py), checked
before a run from another machine is written anywhere: each field that tables, claims, figures,
`status` or the cost model read, of its type, range, length, finite where the trainer makes it
so, and the invariants between the files the trainer keeps:

- a status only where the trainer writes it: `completed` after the config's rounds with every
  loss finite and `judge` finding nothing; `suspect` exactly as `judge` words it of that
  history; `diverged` after fewer rounds, or with its last round's loss not finite;
- each round's per-class accuracies one per class, its accuracy within theirs (a weighted mean
  of them), and so of each local model where the round records theirs (eval.local=per_class);
  the summary's client samples one per client, as partition.csv counts them;
- partition.csv a client-by-class table of counts, one row per client.

shared/campaign/carried_runs.py checks the identity, the summary against its history and the
checkpoint; this module the fields. Each function returns why a file fails (None: it passes).
"""

from __future__ import annotations

import math

from shared.config.schema import RunConfig
from shared.data.catalog import num_classes
from shared.runs.files import is_number
from shared.runs.metrics import CHANCE_PER_CLASS, judge

MAX_TEXT = 1000  # a status, a device's name: a line
RECORD_LISTS = ("per_class_acc", "local_accs", "clients")
MAX_SAMPLES = 10**9 - 1  # a client's samples, or of one class (partition.csv: at most 9 digits a count)
MAX_SETTINGS = 256  # keys of a summary's runtime and environment records, and of a mapping in them


def is_finite(value) -> bool:
    return is_number(value) and math.isfinite(value)


def is_text(value, limit: int = MAX_TEXT) -> bool:
    return isinstance(value, str) and len(value) <= limit and value.isprintable()


def numbers_problem(values, name: str, length: int | None = None, optional=False) -> str | None:
    if not isinstance(values, list) or (length is not None and len(values) != length):
        return f"{name} is not a list{'' if length is None else f' of {length}'}"
    if any(not (is_number(v) or (optional and v is None)) for v in values):
        return f"{name} holds something other than numbers"
    return None


def summary_problem(summary: dict, cfg: RunConfig) -> str | None:
    """The summary's fields, each of its type, range and length."""
    rounds, evals = cfg.federation.rounds, summary.get("eval_rounds")
    if not is_text(summary.get("status")) or not isinstance(summary.get("run_id"), str):
        return "status is not a line of printable text"
    if type(summary.get("rounds_completed")) is not int or not 0 <= summary["rounds_completed"] <= rounds:
        return f"rounds_completed is not a whole number within [0, {rounds}]"
    if not isinstance(evals, list) or any(type(r) is not int or not 1 <= r <= rounds for r in evals):
        return "eval_rounds are not rounds of the run"
    if evals != sorted(set(evals)):
        return "eval_rounds are not in order, each once"
    problem = (
        numbers_problem(summary.get("global_acc"), "global_acc", len(evals))
        or numbers_problem(summary.get("global_loss"), "global_loss", len(evals))
        or numbers_problem(summary.get("local_acc"), "local_acc", len(evals), optional=True)
        or extras_problem(summary, cfg)
    )
    if problem:
        return problem
    wall = summary.get("wall_time_s")
    if not is_finite(wall) or wall < 0:
        return "wall_time_s is not a finite number of seconds"
    targets = summary.get("rounds_to_target")
    if not isinstance(targets, dict) or any(v is not None and (type(v) is not int or v < 1) for v in targets.values()):
        return "rounds_to_target is not a mapping to rounds"
    return None


def extras_problem(summary: dict, cfg: RunConfig) -> str | None:
    """What the trainer adds (extra): the device the cost model reads, the client samples it
    counts, the model's size, the settings and environment tables' provenance shows."""
    classes, per_class = num_classes(cfg), summary.get("per_class_acc")
    if per_class is not None and numbers_problem(per_class, "per_class_acc", classes):
        return f"per_class_acc is not a list of {classes} numbers"
    domain = summary.get("domain_acc")
    if domain is not None and (not isinstance(domain, dict) or not all(is_finite(v) for v in domain.values())):
        return "domain_acc is not a mapping of domains to numbers"
    for key, limit in (("device", 64), ("device_name", MAX_TEXT)):
        if key in summary and not is_text(summary[key], limit):
            return f"{key} is not a line of printable text"
    samples = summary.get("client_samples")
    if samples is not None and (
        not isinstance(samples, list)
        or any(type(n) is not int or not 0 <= n <= MAX_SAMPLES for n in samples)
        or len(samples) > 10**6
    ):
        return "client_samples is not a list of sample counts (whole numbers)"
    if "num_parameters" in summary and (type(summary["num_parameters"]) is not int or summary["num_parameters"] < 0):
        return "num_parameters is not a whole number"
    for key in ("runtime", "environment"):
        if key in summary and (problem := settings_problem(summary[key])):
            return f"{key} {problem}"
    env = summary.get("environment", {})
    if env.get("git_commit") is not None and not is_text(env["git_commit"], 64):
        return "environment's git_commit is not a commit"
    return None


def settings_problem(record) -> str | None:
    """A runtime or environment record as the trainer writes them: a mapping of names to plain
    values (a line of text, a number, a flag, none) or to mappings of such values (the
    environment's packages and numerics)."""

    def plain(value) -> bool:
        return value is None or isinstance(value, (bool, int, float)) or is_text(value)

    if not isinstance(record, dict) or len(record) > MAX_SETTINGS:
        return "is not a mapping of settings"
    for key, value in record.items():
        nested = isinstance(value, dict) and len(value) <= MAX_SETTINGS
        if not is_text(key, 100) or not (plain(value) or (nested and all(map(plain, value.values())))):
            return f"holds {str(key)[:40]!r}, which is not a setting's name and plain value"
        if nested and not all(is_text(k, 100) for k in value):
            return f"holds {str(key)[:40]!r}, which names its values other than by short names"
    return None


def records_problem(history: list[dict], cfg: RunConfig) -> str | None:
    """Each round's record: its numbers finite (the last round's global loss aside: the trainer
    records it, then ends the run as diverged), per-class accuracies one per class, the accuracy within
    theirs."""
    classes, last = num_classes(cfg), len(history)
    for record in history:
        number = record["round"]
        for key in ("train_loss", "global_acc", "global_loss", "local_acc", "seconds"):
            if key in record and not is_finite(record[key]) and not (number == last and key == "global_loss"):
                return f"round {number}'s {key} is not a finite number"
        for key in RECORD_LISTS:
            if key in record and numbers_problem(record[key], key):
                return f"round {number}'s {key} is not a list of numbers"
        per_class = record.get("per_class_acc")
        if per_class is not None and classes is not None and len(per_class) != classes:
            return f"round {number}'s per_class_acc has {len(per_class)} values for {classes} classes"
        if (
            per_class
            and "global_acc" in record
            and not min(per_class) - 1e-6 <= record["global_acc"] <= max(per_class) + 1e-6
        ):
            return f"round {number}'s global_acc lies outside its per-class accuracies"
        if any(type(c) is not int or not 0 <= c < 10**6 for c in record.get("clients", [])):
            return f"round {number}'s clients are not client numbers"
        if (problem := local_per_class_problem(record, cfg, classes or len(per_class or []))) is not None:
            return f"round {number}'s {problem}"
    return None


def local_per_class_problem(record: dict, cfg: RunConfig, classes: int) -> str | None:
    """eval.local=per_class, in a round that tests its local models: a list of per-class
    accuracies for each of its clients, each local accuracy within its model's per-class ones;
    without it, none."""
    if cfg.eval.local != "per_class" or "local_accs" not in record:
        return None if "local_per_class_acc" not in record else "local_per_class_acc is not recorded by this run"
    lists, accs, clients = record.get("local_per_class_acc"), record["local_accs"], record.get("clients")
    if not all(isinstance(v, list) for v in (lists, accs, clients)) or not len(lists) == len(accs) == len(clients):
        return "local_per_class_acc is not a list for each of its clients and local_accs"
    for per_class, acc in zip(lists, accs):
        if numbers_problem(per_class, "local_per_class_acc", classes) or not per_class:
            return f"local_per_class_acc is not a list of {classes} numbers for each local model"
        if is_number(acc) and not min(per_class) - 1e-6 <= acc <= max(per_class) + 1e-6:
            return "local_accs lie outside their per-class accuracies"
    return None


def status_problem(status: str, history: list[dict], cfg: RunConfig) -> str | None:
    """A status only where the trainer writes it (shared/training/trainer.py `end_round`,
    shared/runs/metrics.py `judge`)."""
    kind, rounds, classes = status.split(":")[0], cfg.federation.rounds, num_classes(cfg)
    last_loss = history[-1].get("global_loss", 0.0) if history else 0.0
    if kind == "diverged":
        return (
            None if len(history) < rounds or not is_finite(last_loss) else "status is diverged with every loss finite"
        )
    if len(history) != rounds:
        return f"status is {kind} after {len(history)} of {rounds} rounds"
    if not is_finite(last_loss):
        return f"status is {kind} with a loss that is not finite"
    judged = judge("completed", history, classes) if classes is not None else status
    if status == "completed" and judged.startswith(CHANCE_PER_CLASS):  # judged before that check
        return f"status is completed, but {judged.removeprefix('suspect: ')}: a status of an older version"
    if judged != status:
        return f"status is {kind}, which the trainer does not judge of this history"
    return None


def partition_problem(partition: bytes, cfg: RunConfig, samples: list | None) -> str | None:
    """partition.csv as the trainer writes it: `client,<class>...`, then a row of counts per client."""
    try:
        lines = partition.decode("ascii").splitlines()
    except UnicodeDecodeError:
        return "is not ASCII text"
    classes = num_classes(cfg)
    header = lines[0].split(",") if lines else []
    if not header or header[0] != "client" or (classes is not None and len(header) != classes + 1):
        return f"does not start with client and {classes or 'the'} classes"
    rows = [line.split(",") for line in lines[1:]]
    if any(len(row) != len(header) or not all(cell.isdigit() and len(cell) <= 9 for cell in row) for row in rows):
        return "holds a row that is not a client's counts (whole numbers of at most 9 digits)"
    if [int(row[0]) for row in rows] != list(range(len(rows))):
        return "does not number its clients 0, 1, ..."
    if cfg.partition.kind != "domains" and len(rows) != cfg.partition.clients:
        return f"has {len(rows)} clients, not the config's {cfg.partition.clients}"
    if samples is not None and [sum(map(int, row[1:])) for row in rows] != samples:
        return "does not count the client samples metrics.json records"
    return None
