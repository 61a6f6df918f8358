"""A figure's probes (Figure.probe): a GPU job's computation on a finished run, one CSV a run
beside the runs, named by the run and by the probe's code (results/probes/<paper>-<figure>-<run
id>-<code>.csv, `probe_code`: a change to the probe's module or to its arguments names another
file, which the workflow computes again, and no older probe passes for a current one, here or
in an archive), what it holds (the figure's probe_columns, checked where it comes from another
machine), and which the targets draw from."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import inspect
import io
import json
import os
import re
import sys
from pathlib import Path

from shared.runs.files import aside_path, finished_at, kept_at, write_atomically
from shared.targets.figure_declarations import Figure, paper_figures
from shared.targets.papers import paper_names
from shared.targets.resolve import command_targets

# probe_path's file name: paper, figure, run id, code
PROBE_NAME = re.compile(r"([a-z][a-z0-9_]*)-([A-Za-z0-9_]+)-([0-9a-f]{16})-([0-9a-f]{16})\.csv")
MAX_PROBE_BYTES = 2**20  # a probe's CSV (FedCSD's Fig. 1 at paper scale: about 30 kB)
MAX_PROBE_TEXT = 200  # characters of a probe's text field
# a number as pandas writes one (NaN: an empty field), infinities included; not Python's float()
# syntax, which also takes "1_0", spaces and other scripts' digits that pandas reads as text
NUMBER = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?|[-+]?inf")
# what pandas' read_csv takes for a missing value, not text
NA_TEXT = frozenset(
    {
        "",
        "#N/A",
        "#N/A N/A",
        "#NA",
        "-1.#IND",
        "-1.#QNAN",
        "-NaN",
        "-nan",
        "1.#IND",
        "1.#QNAN",
        "<NA>",
        "N/A",
        "NA",
        "NULL",
        "NaN",
        "None",
        "n/a",
        "nan",
        "null",
    }
)


def probes_dir(runs_dir: str | Path) -> Path:
    """The folder of the figures' probes: beside the runs folder (results/probes/)."""
    return Path(runs_dir).parent / "probes"


def probe_code(figure: Figure) -> str:
    """The first 16 hex digits of the SHA-256 of the source file of the figure's probe and of
    the arguments a functools.partial gives it, as data (FedCSD's Fig. 1: Table III's row it
    distills with). A change to the code it calls elsewhere (shared/) does not count, as a
    finished run does not train again for a change to the trainer."""
    probe = getattr(figure.probe, "func", figure.probe)
    given = [getattr(figure.probe, "args", ()), getattr(figure.probe, "keywords", {})]
    digest = hashlib.sha256(Path(inspect.getsourcefile(probe)).read_bytes())
    digest.update(json.dumps(given, sort_keys=True, default=as_data).encode())  # the same in every process
    return digest.hexdigest()[:16]


def as_data(value):
    """A probe's argument as plain data (a dataclass: its fields); anything else, whose text could
    hold an address that differs from process to process, is refused."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"a probe's argument must be plain data or a dataclass of it, not {type(value).__name__}")


def probe_path(runs_dir: str | Path, paper: str, figure: str, run_id: str, code: str) -> Path:
    """Where `paper`'s `figure`'s probe of run `run_id` is saved, named by the run (so by scale
    and data too) and by the probe's code (`probe_code`)."""
    return probes_dir(runs_dir) / f"{paper}-{figure}-{run_id}-{code}.csv"


def probe_problem(figure: Figure, data: bytes) -> str | None:
    """Why a probe's CSV (from another machine) is not what the figure's probe writes (None: it
    is): at most MAX_PROBE_BYTES, its header the declared columns, then rows as long, each
    "number" a number as pandas writes one or empty (a measure a variant does not take), each
    "text" short, printable text. Read a row at a time, the header first."""
    if len(data) > MAX_PROBE_BYTES:
        return f"holds more than {MAX_PROBE_BYTES >> 10} kB"
    try:
        rows = csv.reader(io.StringIO(data.decode("utf-8"), newline=""))
        columns = list(figure.probe_columns or {})
        if next(rows, None) != columns:
            return f"does not have the columns {figure.paper}/{figure.name}'s probe writes ({', '.join(columns)})"
        count = 0
        for count, row in enumerate(rows, 1):
            problem = row_problem(figure.probe_columns, row)
            if problem:
                return f"line {count + 1} {problem}"
    except (UnicodeDecodeError, csv.Error) as exc:
        return f"is not CSV text ({exc})"
    return None if count else "holds no row"


def row_problem(columns: dict[str, str], row: list[str]) -> str | None:
    if len(row) != len(columns):
        return f"has {len(row)} fields, not {len(columns)}"
    for (column, kind), value in zip(columns.items(), row):
        if kind == "text" and not (
            value.isprintable()
            and len(value) <= MAX_PROBE_TEXT
            and value not in NA_TEXT
            and not NUMBER.fullmatch(value)
        ):
            return f"{column} is not short, printable text (pandas reads it as text)"
        if kind == "number" and value and not NUMBER.fullmatch(value):
            return f"{column} is not a number"
    return None


def is_current(probe: Path, run_dir: Path) -> bool:
    """Whether the probe was computed after its run's result was written (`finished_at`: a
    finished run's metrics.json put back as it was by a group job leaves its probe current)."""
    return probe.stat().st_mtime >= finished_at(run_dir)


def outlasts_its_runs_jobs(probe: Path, run_dir: Path) -> bool:
    """Whether the probe stays current whatever job of its run runs: it was computed after the
    run's kept copy (`kept_at`), which such a job puts back as it was rather than train the run
    again (the workflow's probe rule then compares no time: a group job would compute it again)."""
    kept = kept_at(run_dir)
    return kept is not None and probe.is_file() and probe.stat().st_mtime >= kept


def target_probes(targets: list[str], scale: str, runs_dir: Path, run_ids: set[str]) -> tuple[list[Path], list[str]]:
    """The probes that the targets' figures draw from, of these runs (completed: a probe needs a
    final model), that runs_dir's probes hold up to date (computed after their run's result was
    written, `is_current`, by today's code, as the figure's probe writes them), and a note for
    each one held but not up to date."""
    found, notes = {}, []
    for target in targets:
        paper, names = command_targets([target])
        for figure in (f for name, f in paper_figures(paper).items() if name in names and f.probe is not None):
            code = probe_code(figure)  # its source read and hashed once, not once a run
            for rid in (cell.run_id for cell in figure.cells(scale) if cell.run_id in run_ids):
                path = probe_path(runs_dir, paper, figure.name, rid, code)
                if not path.is_file():
                    continue
                stale = not is_current(path, Path(runs_dir) / rid)
                problem = "is older than its run" if stale else probe_problem(figure, path.read_bytes())
                if problem:
                    notes.append(f"{path} {problem}: left out, its figure computes it again")
                else:
                    found[path] = None
    return list(found), notes


# --- probes from another machine (shared/archive.py) -----------------------------------------


def received_problem(name: str, data: bytes, completed: set[str], scale: str) -> str | None:
    """Why a probe from another machine, named as probe_path names one, is not one this
    project's figure draws (None: it is): a figure with a probe, of one of its runs at `scale`
    that came `completed` with it, as the figure's probe writes it. Any code: a probe of other
    code than this project's is never read here (probe_path names today's)."""
    paper, figure_name, rid, _ = PROBE_NAME.fullmatch(name).groups()
    figure = paper_figures(paper).get(figure_name) if paper in paper_names() else None
    if figure is None or figure.probe is None:
        return f"is the probe of {paper}/{figure_name}, which is no figure with a probe"
    if rid not in completed:
        return f"is a probe of run {rid}, which does not come with it as completed"
    if rid not in {cell.run_id for cell in figure.cells(scale)}:
        return f"is a probe of run {rid}, which is none of {paper}/{figure_name}'s runs at scale={scale}"
    return probe_problem(figure, data)


def destination_problem(runs_dir: Path, names: list[str]) -> str | None:
    """Why probes of these names cannot go beside runs_dir (None: they can): the folder a folder
    or absent, and neither it nor a probe's file a link."""
    folder = probes_dir(runs_dir)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return f"{folder} is a link or not a folder; the probes go there"
    taken = [
        name
        for name in names
        if (folder / name).is_symlink() or (folder / name).exists() and not (folder / name).is_file()
    ]
    return f"{folder / taken[0]} is a link or not a file; a probe goes there" if taken else None


def install_probes(probes: dict[str, bytes], runs_dir: Path, renewed: set[str], same: set[str]) -> int:
    """Probes (file name -> bytes, each checked: `received_problem`) into the probes folder: those
    of `renewed` runs (written anew here) over any there, which is set aside (it was computed from
    the run replaced; the same bytes: kept, made newer than its run); those of runs the `same` as
    here where none is there. A probe of other code than today's is named in a note: the figure
    computes its own. Returns how many were written."""
    written, codes = 0, {}
    for name, data in sorted(probes.items()):
        paper, figure, rid, probe = PROBE_NAME.fullmatch(name).groups()
        dest = probes_dir(runs_dir) / name
        if (paper, figure) not in codes:  # each figure's source read and hashed once
            codes[paper, figure] = probe_code(paper_figures(paper)[figure])
        if probe != codes[paper, figure]:
            print(
                f"note: {name} was computed by other code than this checkout's: {paper}/{figure} computes its own",
                file=sys.stderr,
            )
        if rid in renewed and dest.is_file() and dest.stat().st_size == len(data) and dest.read_bytes() == data:
            os.utime(dest)  # newer than the run written before it: up to date
        elif rid in renewed:
            if dest.exists():
                aside = aside_path(dest, "replaced")
                os.replace(dest, aside)
                print(f"note: {dest} was of the run replaced here; moved to {aside.name}", file=sys.stderr)
            written += install_probe(dest, data)
        elif rid in same and not dest.exists():
            written += install_probe(dest, data)
    return written


def install_probe(dest: Path, data: bytes) -> int:
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(dest, lambda tmp: tmp.write_bytes(data))
    return 1
