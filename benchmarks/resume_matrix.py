"""Kill and resume every method, at several points, and compare with an uninterrupted run.

    python -m benchmarks.resume_matrix [--rounds 4] [--out /tmp/resume]

For each method (a tiny synthetic run, 50% participation so that sampling matters): one run
straight through, then one killed at each point and started again in the same directory. A
point is a round boundary (the process dies as round r starts training its clients, its
checkpoint holding rounds 1..r) or the middle of a write (the k-th checkpoint.pt, or the final
metrics.json, half written when the process dies). "identical" means every round's record
(global and local accuracies and losses, per-class accuracy, training loss, the method's own
metrics) and every weight of the final model are bit-identical. Prints a Markdown table.
tests/runs/test_resume.py holds the same property for one point per method in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
from pathlib import Path
from unittest import mock

import torch

from shared.methods.registry import method_names
from shared.runs import directory as run_directory
from shared.runs import files as run_files
from shared.runs import tensor_files
from shared.targets.configs import load_config
from shared.training import clients as client_training
from shared.training import trainer

TINY = [
    "dataset=synthetic",
    "dataset.synthetic.train_per_class=60",
    "dataset.synthetic.test_per_class=20",
    "dataset.synthetic.image_size=16",
    "partition.clients=4",
    "federation.participation=0.5",
    "local.epochs=1",
    "local.batch_size=32",
    "local.lr=0.03",
    "trainer.device=cpu",
    "trainer.progress=false",
]
NEEDS = {"fedcad": ["aux.per_class=5"], "fedssd": ["aux.per_class=5"], "moon": ["model.projection_dim=16"]}


class Killed(KeyboardInterrupt):
    """The process dying: nothing on the way out catches it (a BaseException, as ^C's)."""


def killed_at_round(round: int):
    """While active, a run dies as round `round` (from 0) starts training its clients, so that
    its checkpoint holds rounds 1..round."""
    real = client_training.train_client

    def train_client(method, client, model, cfg, r, *rest):
        if r == round:
            raise Killed
        return real(method, client, model, cfg, r, *rest)

    return mock.patch.object(client_training, "train_client", train_client)


def killed_writing(name: str, nth: int):
    """While active, a run dies halfway through its `nth` write of the file `name`."""
    real, seen = run_directory.write_atomically, []

    def write_atomically(path, write):
        seen.append(path.name)
        if seen.count(name) < nth:
            return real(path, write)
        tmp = run_files.temporary_path(path)
        write(tmp)
        tmp.write_bytes(tmp.read_bytes()[: tmp.stat().st_size // 2])
        raise Killed

    writers = contextlib.ExitStack()  # the directory's config.yaml, files' JSON files, tensor_files' tensors
    for module in (run_directory, run_files, tensor_files):
        writers.enter_context(mock.patch.object(module, "write_atomically", write_atomically))
    return writers


def record(out: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("seconds")
    return rows, torch.load(out / "model.pt", weights_only=True)


def identical(a: Path, b: Path) -> bool:
    (rows_a, model_a), (rows_b, model_b) = record(a), record(b)
    return (
        rows_a == rows_b
        and model_a.keys() == model_b.keys()
        and all(torch.equal(model_a[k], model_b[k]) for k in model_a)
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None, help="working directory (default: a temporary one)")
    args = parser.parse_args(argv)
    work = args.out or Path(tempfile.mkdtemp(prefix="resume-"))
    points = {f"round {r} start": lambda r=r: killed_at_round(r) for r in range(1, args.rounds)}
    points |= {
        "mid-write checkpoint 2": lambda: killed_writing("checkpoint.pt", 2),
        "mid-write metrics.json": lambda: killed_writing("metrics.json", 1),
    }
    print("| method | " + " | ".join(points) + " |")
    print("|---|" + "---|" * len(points))
    for method in method_names():
        cfg = load_config(
            None,
            [
                *TINY,
                f"data_root={work / 'data'}",
                f"method={method}",
                f"federation.rounds={args.rounds}",
                *NEEDS.get(method, []),
            ],
        )
        straight = work / method / "straight"
        trainer.run(cfg, straight)
        verdicts = []
        for i, kill in enumerate(points.values()):
            out = work / method / f"killed{i}"
            try:
                with kill():
                    trainer.run(cfg, out)
                verdicts.append("NOT KILLED")  # the point was never reached: nothing was tested
                continue
            except Killed:
                pass
            trainer.run(cfg, out)
            verdicts.append("identical" if identical(straight, out) else "DIFFERS")
        print(f"| {method} | " + " | ".join(verdicts) + " |", flush=True)
    if args.out is None:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
