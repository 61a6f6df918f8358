"""Which runs a campaign's targets need, and on which data: a copy of the official data
(dataset.copy), a table cut to its part on the copy or to what is finished, and the labels
that name the copy on what is built from it (the workflow's too: workflow/rules/common.smk)."""

from __future__ import annotations

import dataclasses
import zipfile
from collections import Counter
from pathlib import Path

from shared.config.dotted import deep_merge
from shared.config.schema import ConfigError, RunConfig, identity, run_id
from shared.data.catalog import DataError, copy_label, file_digest, find_copy, is_sha256
from shared.runs.files import holds_result, write_atomically
from shared.targets.resolve import target_cells
from shared.targets.table_declarations import expand, keep_rows, scale_seeds, seeds_text

IMAGE_KINDS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG"}  # a copy's kind, from most of its files' suffix


@dataclasses.dataclass(frozen=True)
class Copy:
    """A copy of the official data the runs train on (dataset.copy)."""

    dataset: str
    sha256: str
    kind: str = ""  # "JPEG", from the files it holds
    path: Path | None = None

    @property
    def label(self) -> str:
        return copy_label(self.dataset, self.sha256, self.kind)

    @property
    def slug(self) -> str:
        return f"{self.dataset}-{self.kind.lower() + '-' if self.kind else ''}copy-{self.sha256[:7]}"


def parse_copy(text: str | None) -> Copy | None:
    """--copy NAME=FILE (hashed here) or NAME=SHA256."""
    if text is None:
        return None
    name, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"--copy {text!r}: expected NAME=FILE or NAME=SHA256, e.g. cifar10=cifar10-jpeg.zip")
    if is_sha256(value):
        return Copy(name, value)
    path = Path(value).expanduser()
    if not path.is_file():
        raise DataError(f"--copy {text!r}: {path} is not a file")
    return Copy(name, file_digest(path, "sha256"), copy_kind(path), path)


def located_copy(text: str | None, data_root: str | Path) -> Copy | None:
    """NAME=FILE, or NAME=SHA256 found under the data root's copies/ by its content, with its
    kind read from the file: the workflow (`--config copy=...`) names its folder and labels
    its outputs as the shipped tables of that copy are named and labelled."""
    copy = parse_copy(text)
    return copy if copy is None or copy.path is not None else locate(copy, data_root)


def locate(copy: Copy, data_root: str | Path) -> Copy:
    """A copy named by its SHA-256, found under the data root's copies/, with its kind read
    from the file (raises DataError where it is not there)."""
    path = find_copy(Path(data_root), copy.sha256, remember=False)
    return dataclasses.replace(copy, kind=copy_kind(path), path=path)


def copy_kind(path: Path) -> str:
    """ "JPEG" for a zip of mostly .jpg files, "PNG" for .png; "" otherwise."""
    if path.suffix != ".zip":
        return ""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{path} is not a readable zip file ({exc})") from None
    suffixes = Counter(Path(n).suffix.lower() for n in names)
    common = suffixes.most_common(1)[0][0] if suffixes else ""
    return IMAGE_KINDS.get(common, "")


def on_copy(cfg: RunConfig, copy: Copy | None) -> RunConfig | None:
    """The config trained on the copy; None for a run on another dataset (no data for it)."""
    from shared.targets.configs import load_config

    if copy is None:
        return cfg
    if cfg.dataset.name != copy.dataset:
        return None
    return load_config(None, deep_merge(identity(cfg), {"dataset": {"copy": copy.sha256}}))


def training_order(cell) -> tuple:
    """A campaign's order of its cells (a stable sort's key: the table's order within): seed 0
    of every cell, the rows its table trains first before the others, then seed 1, ..."""
    return cell.seed, not cell.trained_first


def campaign_runs(targets: list[str], scale: str, copy: Copy | None) -> tuple[dict[str, RunConfig], int]:
    """run id -> config of every run the targets need, in `training_order`; and how many runs
    need data other than the copy (left out)."""
    cells = [cell for target in targets for cell in target_cells(target, scale)]
    runs, skipped = {}, set()
    for cell in sorted(cells, key=training_order):
        cfg = on_copy(cell.config, copy)
        if cfg is None:
            skipped.add(cell.run_id)
        else:
            runs.setdefault(run_id(cfg), cfg)
    return runs, len(skipped)


def copy_part(table, scale: str, copy: Copy):
    """The table cut to its part on the copy's dataset: the settings with any run on it, the
    methods with every run on it (FedGKD's tables give datasets columns or rows)."""

    cells = expand(table, scale)

    def on_copy(cell):
        return cell.config.dataset.name == copy.dataset

    columns = [k for k in table.columns if any(on_copy(c) for c in cells if c.column is k)]
    rows = {
        r.label
        for r in table.rows
        if all(on_copy(c) for c in cells if c.row is r and any(c.column is k for k in columns))
    }
    block = keep_columns(table, columns)
    return keep_rows(block, [r for r in block.rows if r.label in rows])


def keep_columns(table, columns: list):
    """The table with only `columns`: what names a setting cut away goes with it (its printed
    numbers, the rows' settings for it, its inconsistencies, its rises)."""
    keep = [i for i, column in enumerate(table.columns) if any(column is k for k in columns)]
    settings = {table.columns[i].label for i in keep}
    return dataclasses.replace(
        table,
        columns=[table.columns[i] for i in keep],
        rows=[
            dataclasses.replace(r, per_column={k: v for k, v in r.per_column.items() if k in settings})
            for r in table.rows
        ],
        reported={row: [values[i] for i in keep] for row, values in table.reported.items()},
        inconsistencies=[m for m in table.inconsistencies if m.column in settings],
        rises=tuple(label for label in table.rises if label in settings),
    )


def finished_part(table, scale: str, runtime: dict, runs_dir: Path):
    """The table cut to what is finished: the largest block of the paper's methods x settings
    finished at seed 0, each setting with as many further seeds as all of its cells have (two
    methods or more where there are; most runs; of those, most cells, most methods, then the
    table's first settings), and each reading of a kept row that has all of those seeds (a
    reading, no row of the paper's, never costs the paper's rows a seed); (None, "") when no
    cell is finished. A setting with fewer seeds than the table's keeps its own (`Column.seeds`).
    Returns (table, the note that marks it partial, empty when it is whole)."""

    cells = expand(table, scale, runtime)
    missing = {(c.row.label, c.column.label, c.seed) for c in cells if not holds_result(runs_dir / c.run_id)}
    implemented = [r for r in table.rows if r.implemented]
    seeds = scale_seeds(table, scale)
    printed = [r for r in implemented if r.reading_of is None]
    rows, columns = largest_finished_block(printed, table.columns, missing, seeds)
    if not rows:
        return None, ""
    kept = {k.label: seeds_of(rows, k, missing, seeds) for k in columns}

    def finished(row) -> bool:
        return not any((row.label, k.label, seed) in missing for k in columns for seed in kept[k.label])

    labels = {r.label for r in rows}
    labels |= {r.label for r in implemented if r.reading_of in labels and finished(r)}
    block = keep_columns(table, columns)
    block = dataclasses.replace(block, columns=[dataclasses.replace(k, seeds=kept[k.label]) for k in block.columns])
    cut = keep_rows(
        block, [r for r in block.rows if r.label in labels or not r.implemented], seeds=max(kept.values(), key=len)
    )
    partial = (
        len(labels) < len(implemented)
        or len(columns) < len(table.columns)
        or any(len(k) < len(seeds) for k in kept.values())
    )
    settings = f", settings {', '.join(k.label for k in columns)}" if len(columns) < len(table.columns) else ""
    note = (
        f"partial: {len(labels)} of {len(implemented)} rows{settings}, seeds {seeds_text(cut, scale)} of {list(seeds)}"
    )
    return cut, note if partial else ""


def seeds_of(rows: list, column, missing: set, seeds: tuple) -> tuple[int, ...]:
    """The first seed and each further one, in order, that every cell of the rows has in the column."""
    kept = [seeds[0]]
    for seed in seeds[1:]:  # another seed never costs a cell of the paper's rows
        if any((r.label, column.label, seed) in missing for r in rows):
            break
        kept.append(seed)
    return tuple(kept)


def largest_finished_block(rows: list, columns: list, missing: set, seeds: tuple) -> tuple[list, list]:
    """(rows, columns) of the most runs (cells x the seeds all of a column's cells have,
    `seeds_of`) none of which is `missing` (row label, column label, seed), of two methods or
    more where there are (one compares nothing): over every subset of the columns (a table has
    a handful), the rows finished in all of them at the first seed."""
    best, best_key = ([], []), (False, 0, 0, 0, ())
    for mask in range(1, 2 ** len(columns)):
        chosen = [k for i, k in enumerate(columns) if mask >> i & 1]
        done = [r for r in rows if not any((r.label, k.label, seeds[0]) in missing for k in chosen)]
        first_settings = tuple(-i for i, k in enumerate(columns) if mask >> i & 1)  # ties: the table's first
        runs = sum(len(done) * len(seeds_of(done, k, missing, seeds)) for k in chosen)
        key = (len(done) > 1, runs, len(done) * len(chosen), len(done), first_settings)
        if done and key > best_key:
            best, best_key = (done, chosen), key
    return best


def data_folder(scale: str, copy: Copy | None) -> str:
    """The name of the folder of tables built at `scale` on `copy` (or the official data),
    shipped or built by the workflow: "cifar10-jpeg-copy-dfaab4e", "smoke-cifar10-copy-1a2b3c4"."""
    return "-".join([*([] if scale == "paper" else [scale]), *([copy.slug] if copy else [])]) or "official"


def table_dir(shipped: Path, paper: str, name: str, scale: str, copy: Copy | None) -> Path:
    """Where a shipped table lands: its own folder per data (the copy's) and scale."""
    return shipped / "tables" / data_folder(scale, copy) / paper / name


def copy_runtime(copy: Copy | None) -> dict:
    """What a runtime adds for runs on the copy (dataset.copy: their own run ids)."""
    return {"dataset": {"copy": copy.sha256}} if copy else {}


def labelled(target, copy: Copy | None, note: str = ""):
    """A table or figure whose caption names the copy (and the partial note); a table's name
    gets the copy's slug too (in ASCII: its LaTeX label, the titles drawn from it), keeps its
    declared name (`renamed_from`), by which its claims are found, and names its data in its
    claims as the caption does."""
    labels = " ".join(f"[{label}]" for label in (copy.label if copy else "", note) if label)
    if not labels:
        return target
    renamed = (
        {"name": f"{target.name}-{copy.slug}", "renamed_from": target.name, "data": copy.label}
        if copy and target.name.startswith("table")
        else {}
    )
    return dataclasses.replace(target, caption=f"{target.caption} {labels}", **renamed)


def label_outputs(out: Path, copy: Copy | None, note: str = "") -> None:
    """The data in provenance.yaml and, on a copy, in every CSV (a `data` column), beside the
    captions: a file read alone still says what the runs trained on."""
    import pandas as pd
    import yaml

    data = copy.label if copy else "official"
    for path in out.glob("*.csv") if copy else []:
        frame = pd.read_csv(path)
        frame["data"] = data
        write_atomically(path, lambda tmp, f=frame: f.to_csv(tmp, index=False))
    provenance = yaml.safe_load((out / "provenance.yaml").read_text())
    provenance.update(data=data, partial=note or False)
    write_atomically(out / "provenance.yaml", lambda tmp: tmp.write_text(yaml.safe_dump(provenance, sort_keys=False)))
