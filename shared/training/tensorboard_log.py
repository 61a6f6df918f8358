"""A run's per-round metrics as TensorBoard event files, written while it trains
(`trainer.tensorboard=true`; the workflow's `--config tensorboard=true`), so that

    tensorboard --logdir results/runs

shows every run's curves live. The events go to `<run directory>/tensorboard/`; a resumed run
adds its later rounds there. metrics.jsonl stays the record the tables are built from: this is
a view of it, and needs the optional tensorboard package (pip install -r requirements-tensorboard.txt).
"""

from __future__ import annotations

import importlib.util
from numbers import Real
from pathlib import Path

from shared.config.schema import ConfigError, RunConfig

SUBDIRECTORY = "tensorboard"


class TensorBoardLog:
    """Each round's numbers as scalars at step = the round: a number under its own key (global_acc,
    train_loss, seconds, a method's own such as mask_filter_rate), a list of floats (per-class
    accuracy) as one scalar per entry, `key/index`."""

    def __init__(self, directory: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(directory))

    def write(self, record: dict) -> None:
        step = record["round"]
        for key, value in record.items():
            if key == "round":
                continue
            if isinstance(value, Real) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)
            elif isinstance(value, list) and value and all(isinstance(v, float) for v in value):
                for index, entry in enumerate(value):
                    self.writer.add_scalar(f"{key}/{index}", entry, step)
        self.writer.flush()  # visible to a TensorBoard watching the run now, not when it ends

    def close(self) -> None:
        self.writer.close()


class NoLog:
    """What a run without trainer.tensorboard writes to: nothing."""

    def write(self, record: dict) -> None:
        pass

    def close(self) -> None:
        pass


def tensorboard_log(cfg: RunConfig, run_dir: str | Path) -> TensorBoardLog | NoLog:
    """The run's TensorBoard writer where trainer.tensorboard is on; a missing package is said
    in one line before the first round trains."""
    if not cfg.trainer.tensorboard:
        return NoLog()
    if importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            "trainer.tensorboard=true needs the tensorboard package: "
            "pip install -r requirements-tensorboard.txt (or pip install '.[tensorboard]')"
        )
    return TensorBoardLog(Path(run_dir) / SUBDIRECTORY)
