"""A figure's probes (Figure.probe): a GPU job's computation on a finished run, one CSV a run
beside the runs (results/probes/<paper>-<figure>-<run id>.csv), what it holds (the figure's
probe_columns, checked where it comes from another machine), and which the targets draw from."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

from shared.targets.figure_declarations import Figure, paper_figures
from shared.targets.resolve import command_targets


def probes_dir(runs_dir: str | Path) -> Path:
    """The folder of the figures' probes: beside the runs folder (results/probes/)."""
    return Path(runs_dir).parent / "probes"


def probe_path(runs_dir: str | Path, paper: str, figure: str, run_id: str) -> Path:
    """Where the probe of `paper`'s `figure` on run `run_id` is saved, named by the run (so by
    scale and data too)."""
    return probes_dir(runs_dir) / f"{paper}-{figure}-{run_id}.csv"


PROBE_NAME = re.compile(r"([a-z][a-z0-9_]*)-([A-Za-z0-9_]+)-([0-9a-f]{16})\.csv")  # probe_path's file name
MAX_PROBE_TEXT = 200  # characters of a probe's text field


def probe_problem(figure: Figure, data: bytes) -> str | None:
    """Why a probe's CSV (from another machine: bounded by its reader) is not what the figure's
    probe writes (None: it is): its header the declared columns, every row as long, each
    "number" a finite number or empty (a measure a variant does not take), each "text" short,
    printable text."""
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    except (UnicodeDecodeError, csv.Error) as exc:
        return f"is not CSV text ({exc})"
    columns = list(figure.probe_columns or {})
    if not rows or rows[0] != columns:
        return f"does not have the columns {figure.paper}/{figure.name}'s probe writes ({', '.join(columns)})"
    if len(rows) < 2:
        return "holds no row"
    for number, row in enumerate(rows[1:], 2):
        if len(row) != len(columns):
            return f"line {number} has {len(row)} fields, not {len(columns)}"
        for column, value in zip(columns, row):
            kind = figure.probe_columns[column]
            if not field_fits(kind, value):
                return f"line {number}: {column} is not {'a number' if kind == 'number' else 'short, printable text'}"
    return None


def field_fits(kind: str, value: str) -> bool:
    if kind == "text":
        return value.isprintable() and len(value) <= MAX_PROBE_TEXT
    try:
        return value == "" or math.isfinite(float(value))
    except ValueError:
        return False


def target_probes(targets: list[str], scale: str, runs_dir: Path, run_ids: set[str]) -> list[Path]:
    """The probes that the targets' figures draw from, of these runs, that runs_dir's probes hold."""
    found = {}
    for target in targets:
        paper, names = command_targets([target])
        for figure in (f for name, f in paper_figures(paper).items() if name in names and f.probe is not None):
            for rid in (cell.run_id for cell in figure.cells(scale) if cell.run_id in run_ids):
                path = probe_path(runs_dir, paper, figure.name, rid)
                if path.is_file():
                    found[path] = None
    return list(found)
