"""Genuine campaign states without training: a run's files as the trainer writes them (its
config.yaml, a history of its config's rounds, the summary `shared.runs.metrics.summarize` makes of
it, a checkpoint of tensors), put into a state file by `write_state`. The trust tests mutate
such a state along each class of damage or forgery."""

import io
import json

import torch
import yaml

from shared.campaign.state import write_state
from shared.config.schema import RunConfig, identity, run_id, to_dict
from shared.data.catalog import num_classes
from shared.models.registry import known_state_shapes
from shared.runs.metrics import summarize


def history(cfg: RunConfig, rounds: int) -> list[dict]:
    """One record a round, evaluated every round, accuracies rising."""
    classes = num_classes(cfg)
    return [
        {
            "round": r,
            "clients": [0, 1],
            "train_loss": 2.0 / r,
            "global_acc": 20.0 + 5 * r,
            "global_loss": 2.0 / r,
            "per_class_acc": [20.0 + 5 * r] * classes,
            "local_acc": 30.0 + r,
            "local_accs": [30.0 + r] * 2,
            "seconds": 0.5,
        }
        for r in range(1, rounds + 1)
    ]


def config_yaml(cfg: RunConfig) -> bytes:
    return yaml.safe_dump({"run_id": run_id(cfg), **to_dict(cfg)}, sort_keys=False).encode()


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def partition_csv(cfg: RunConfig) -> bytes:
    """The client-by-class counts a run of `cfg` writes: 5 samples of each class per client."""
    classes = num_classes(cfg)
    rows = [",".join(["client", *map(str, range(classes))])]
    rows += [",".join([str(client), *["5"] * classes]) for client in range(cfg.partition.clients)]
    return ("\n".join(rows) + "\n").encode()


def finished_files(cfg: RunConfig, status: str = "completed") -> dict[str, bytes]:
    records = history(cfg, cfg.federation.rounds)
    summary = summarize(records, cfg, status, 12.0, {"device": "cuda:0"})
    return {
        "config.yaml": config_yaml(cfg),
        "partition.csv": partition_csv(cfg),
        "metrics.jsonl": jsonl(records),
        "metrics.json": json.dumps(summary, indent=1).encode(),
    }


def model_state(cfg: RunConfig) -> dict:
    """The config's model's tensors, zeros: what a checkpoint's global model holds."""
    return {name: torch.zeros(shape) for name, shape in known_state_shapes(cfg).items()}


def checkpoint(cfg: RunConfig, records: list[dict]) -> bytes:
    buffer = io.BytesIO()
    torch.save(
        {"identity": identity(cfg), "history": records, "global": model_state(cfg), "method": {}, "elapsed": 3.0},
        buffer,
    )
    return buffer.getvalue()


def progress_files(cfg: RunConfig, rounds: int = 1) -> dict[str, bytes]:
    records = history(cfg, rounds)
    return {
        "config.yaml": config_yaml(cfg),
        "partition.csv": partition_csv(cfg),
        "metrics.jsonl": jsonl(records),
        "checkpoint.pt": checkpoint(cfg, records),
    }


def write_genuine_state(path, about: dict, finished: list[RunConfig], progress: list[RunConfig]) -> None:
    files = [
        (f"finished/{run_id(cfg)}/{name}", data, 0.0) for cfg in finished for name, data in finished_files(cfg).items()
    ]
    files += [
        (f"progress/{run_id(cfg)}/{name}", data, 0.0) for cfg in progress for name, data in progress_files(cfg).items()
    ]
    write_state(path, files, about)
