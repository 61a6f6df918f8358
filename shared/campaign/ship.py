"""`status` and `import`: how far the targets' runs are; a returned state's checkpoints restored
and its finished runs shipped (results/shipped/), with the tables and figures built from them."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from shared.campaign.first_cells import chosen_cells
from shared.campaign.shipped_reading import listing_entry, name_unreadable
from shared.campaign.state import (
    RESULTS,
    RUNS_DIR,
    manifest_copy,
    read_state,
    restore,
    state_defaults,
    state_runs,
    trusted_members,
)
from shared.campaign.state_reading import FIRST, MEMBER, check_inside
from shared.config.schema import ConfigError, RunConfig
from shared.runs.files import (
    RunFilesError,
    history_rounds,
    holds_result,
    printable,
    read_summary,
    remove_dead_temporaries,
    rounds_done,
    write_atomically,
    write_folder_atomically,
)
from shared.runs.locking import claim_runs
from shared.runs.shipped import SHIPPED, is_finished, put_finished
from shared.targets.copies import (
    Copy,
    campaign_runs,
    copy_part,
    copy_runtime,
    finished_part,
    keep_columns,
    label_outputs,
    labelled,
    table_dir,
)
from shared.targets.cost import gpu_hours, measured_throughput
from shared.targets.figure_declarations import get_figure, paper_figures
from shared.targets.papers import paper_names
from shared.targets.resolve import TargetError, target_parts
from shared.targets.table_declarations import declared, expand, get_table, keep_rows


def run_progress(
    rid: str, cfg: RunConfig, runs_dir: Path, shipped_runs: Path, state: dict[str, bytes], finished_in_state: set[str]
) -> float:
    """The fraction of the run's rounds done: 1 finished (here, shipped or in the state: a
    result, not a recorded failure; `state_runs`)."""
    if is_finished(rid, runs_dir, shipped_runs) or rid in finished_in_state:
        return 1.0
    rounds = max(rounds_done(runs_dir / rid), history_rounds(state.get(f"progress/{rid}/metrics.jsonl", b"")), 0)
    return rounds / cfg.federation.rounds


def cell_progress(cell, state: dict[str, bytes], finished_in_state: set[str], args) -> str:
    """ "finished" (with its final accuracy where it is here), or the rounds done of the run's."""
    runs_dir, shipped_runs = args.root / RUNS_DIR, args.root / SHIPPED / "runs"
    if is_finished(cell.run_id, runs_dir, shipped_runs) or cell.run_id in finished_in_state:
        for folder in (shipped_runs, runs_dir):
            accuracy = final_accuracy(folder / cell.run_id)
            if accuracy is not None:
                return f"finished, {accuracy:.2f}% at the last round (run {cell.run_id})"
        return f"finished (run {cell.run_id})"
    history = state.get(f"progress/{cell.run_id}/metrics.jsonl", b"")
    rounds = max(rounds_done(runs_dir / cell.run_id), history_rounds(history), 0)
    done = f"{rounds} round{'s' if rounds > 1 else ''} of {cell.rounds} done"
    return f"{done} (run {cell.run_id})" if rounds else f"not started (run {cell.run_id})"


def final_accuracy(run_dir: Path) -> float | None:
    """The last round's global accuracy a finished run's metrics.json records; None if unreadable."""
    try:
        value = read_summary(run_dir)["final_acc"]
    except (OSError, RunFilesError, KeyError):
        return None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


# The runtime keys that say how a run trained, shown beside the gate's verdict they followed;
# those that act only on CUDA are left out for runs on the CPU (which record them as they were set)
SHOWN_SETTINGS = ("trainer.device", "trainer.cuda_graphs", "trainer.clients_per_step", "trainer.deterministic")
CUDA_ONLY_SETTINGS = ("trainer.cuda_graphs",)


def shown_settings(runtime: dict) -> str:
    """The SHOWN_SETTINGS a run's runtime record holds, but for CUDA's on a CPU run, each value shortened."""
    on_cpu = runtime.get("trainer.device") == "cpu"
    return ", ".join(
        f"{key}={json.dumps(runtime[key])[:40]}"
        for key in SHOWN_SETTINGS
        if key in runtime and not (on_cpu and key in CUDA_ONLY_SETTINGS)
    )


def trained_with(run_dirs) -> list[str]:
    """One line per way the finished runs in `run_dirs` trained: the GPU session gate's verdict
    (shared/campaign/gate.py; none outside a session) and the settings that followed it, from
    each metrics.json's runtime record (read as untrusted: values shortened, a record that does
    not read left out)."""
    tally: Counter = Counter()
    for run_dir in run_dirs:
        try:
            runtime = read_summary(run_dir)["runtime"]
        except (OSError, RunFilesError, KeyError):
            continue
        if isinstance(runtime, dict):
            gate = runtime.get("trainer.gate")  # None: trained by `campaign train`, outside a session
            tally[json.dumps(gate)[:40] if gate is not None else "none", shown_settings(runtime)] += 1
    return [
        f"{n} run{'s' * (n != 1)} trained with {shown or 'no runtime record'} (gate: {gate})"
        for (gate, shown), n in sorted(tally.items())
    ]


def status(args) -> int:

    state = state_defaults(args)
    name_unreadable(args.root / SHIPPED / "runs")  # counted as the workflow counts it; named, to be removed
    finished_in_state = {rid for _, rid in state_runs(state, ("finished",))} | args.ledger  # finished elsewhere too
    speed = {
        model: m["samples_per_s"]
        for runs_dir in (args.root / SHIPPED / "runs", args.root / RUNS_DIR)
        for model, m in measured_throughput("cuda", runs_dir).items()
    }  # this machine's runs win

    def tally(targets: list[str]) -> tuple[Counter, int]:
        runs, skipped = campaign_runs(targets, args.scale, args.copy_spec)
        line = Counter()
        for rid, cfg in runs.items():
            done = run_progress(rid, cfg, args.root / RUNS_DIR, args.root / SHIPPED / "runs", state, finished_in_state)
            line["finished" if done == 1 else "in progress" if done > 0 else "missing"] += 1
            line["hours"] += (1 - done) * gpu_hours(cfg, speed)
        return line, skipped

    for cell in chosen_cells(args.first, args.targets, args.scale, args.copy_spec):  # the cells trained first
        print(f"first: {cell.name}: {cell_progress(cell, state, finished_in_state, args)}")
    for target in args.targets:
        line, skipped = tally([target])
        print(
            f"{target}: {line['finished']} finished, {line['in progress']} in progress, {line['missing']} missing"
            f"{f', {skipped} need other data' if skipped else ''}; {line['hours']:.1f} GPU-hours left"
        )
    total = tally(args.targets)[0]  # a run two targets share counts once
    calibrated = f"calibrated on {', '.join(sorted(speed))}" if speed else "not calibrated: estimated throughput"
    print(
        f"total: {total['finished']} finished, {total['in progress']} in progress, {total['missing']} missing; "
        f"{total['hours']:.1f} GPU-hours left at scale={args.scale}"
        f"{f' on {args.copy_spec.label}' if args.copy_spec else ''} ({calibrated})"
    )
    folders = (args.root / SHIPPED / "runs", args.root / RUNS_DIR)  # a run shipped and here counts once, shipped
    finished = [
        next((f / rid for f in folders if (f / rid / "metrics.json").is_file()), None)
        for rid in campaign_runs(args.targets, args.scale, args.copy_spec)[0]
    ]
    for line in trained_with(filter(None, finished)):
        print(f"finished: {line}")
    return 0


def ship(members: dict[str, bytes], shipped_runs: Path) -> dict[str, list[str]]:
    """The state's finished runs into shipped_runs/<id>/, each holding its lock; a run shipped
    already is left as it is."""
    done = {"shipped": [], "kept": []}
    by_run = {rid: files for (_, rid), files in state_runs(members, ("finished",)).items()}
    with ExitStack() as locks:  # another import may write the same runs
        claim_runs(shipped_runs, [rid for rid in by_run if not holds_result(shipped_runs / rid)], locks)
        for rid, files in by_run.items():
            done["shipped" if put_finished(shipped_runs / rid, files) else "kept"].append(rid)
    return done


def named_target(target: str, prefix: str) -> tuple[str, str] | None:
    """(paper, name) of the target papers/<paper>/<name> where name starts with prefix; else None."""
    parts = target_parts(target)  # as target_cells reads it
    return (parts[0], parts[1]) if len(parts) == 2 and parts[1].startswith(prefix) else None


def build_shipped_table(target: str, scale: str, copy: Copy | None, shipped: Path) -> Path | None:
    """The target's table from the shipped runs, labelled with the copy and marked partial;
    None when it is not a table or nothing of it is finished."""
    from shared.reporting.tables import build_table

    parts = named_target(target, "table")
    if parts is None:
        return None
    table = get_table(*parts)
    runtime = copy_runtime(copy)
    table, note = finished_part(copy_part(table, scale, copy) if copy else table, scale, runtime, shipped / "runs")
    if table is None:
        return None
    out = check_inside(table_dir(shipped, parts[0], parts[1], scale, copy), shipped.parent)

    def write(folder: Path) -> None:
        build_table(labelled(table, copy, note), scale, shipped / "runs", folder, runtime)
        label_outputs(folder, copy, note)

    write_folder_atomically(out, write)
    return out


def build_shipped_figure(target: str, scale: str, copy: Copy | None, shipped: Path) -> Path | None:
    """The target's figure from the shipped runs, its caption labelled with the copy: whole once
    all its runs are shipped; before, where it draws from a part (`Figure.draws_partial`), from
    the finished part of its table, as a shipped table is, and marked partial; else None."""
    from shared.reporting.figures import build_figure

    parts = named_target(target, "fig")
    if parts is None:
        return None
    figure, note = figure_on(get_figure(*parts), scale, copy), ""
    runtime = copy_runtime(copy)
    cells = drawn_cells(figure, scale, copy)
    if not cells:
        return None
    if not all(holds_result(shipped / "runs" / c.run_id) for c in cells):
        if not figure.draws_partial:
            return None
        table, note = finished_part(figure.source, scale, runtime, shipped / "runs")
        if table is None or figure.kind == "sweep" and len(table.columns) < 2:  # one setting: a point, no sweep
            return None
        figure = dataclasses.replace(figure, table=table)
    out = check_inside(table_dir(shipped, parts[0], parts[1], scale, copy), shipped.parent)

    def write(folder: Path) -> None:
        build_figure(labelled(figure, copy, note), scale, shipped / "runs", folder, runtime)
        label_outputs(folder, copy, note)

    write_folder_atomically(out, write)
    return out


def figure_on(figure, scale: str, copy: Copy | None):
    """The figure with its table cut to the settings and methods it draws (on the copy's data)."""
    table = figure.source
    table = keep_columns(table, [c for c in table.columns if figure.columns is None or c.label in figure.columns])
    table = keep_rows(table, [r for r in table.rows if figure.rows is None or r.label in figure.rows])
    return dataclasses.replace(figure, table=copy_part(table, scale, copy) if copy else table)


def drawn_cells(figure, scale: str, copy: Copy | None) -> list:
    """The cells a figure on the copy's data (`figure_on`) draws: a figure of partitions too, which trains none."""
    return figure.cells(scale, copy_runtime(copy)) if figure.source.columns else []


def drawn_runs(target: str, scale: str, copy: Copy | None) -> set[str]:
    """The runs a shipped table or figure is built from."""
    parts = named_target(target, "fig")
    if parts is None:
        return set(campaign_runs([target], scale, copy)[0])
    return {c.run_id for c in drawn_cells(figure_on(get_figure(*parts), scale, copy), scale, copy)}


def write_listing(shipped: Path) -> Path:
    """shipped/README.md: every shipped table and figure (linked) and how many runs are shipped."""
    runs = sorted(p.parent.name for p in (shipped / "runs").glob("*/metrics.json"))
    tables = sorted(p.parent for p in (shipped / "tables").glob("*/*/*/provenance.yaml"))  # and figures
    lines = [
        "# Shipped paper-scale results",
        "",
        "Generated by `python -m shared.campaign import`; see [docs/gpu-sessions.md](../../docs/gpu-sessions.md).",
        "",
        f"{len(runs)} finished run{'' if len(runs) == 1 else 's'} in {'[`runs/`](runs/)' if runs else '`runs/`'}"
        " (config, metrics, per-round curves; no models).",
        "",
        *(f"- {line}" for line in trained_with(shipped / "runs" / rid for rid in runs)),
        *([""] if runs else []),
    ]
    if not tables:
        lines.append("No table is shipped yet: no paper-scale run has finished.")
    lines += [listing_entry(shipped, path) for path in tables]
    write_atomically(
        check_inside(shipped / "README.md", shipped.parent), lambda tmp: tmp.write_text("\n".join(lines) + "\n")
    )
    return shipped / "README.md"


def affected_tables(manifest: dict, copy: Copy | None, shipped: Path) -> list[str]:
    """The state's targets, every other table that reads a shipped run (a run is shared by
    every table whose cell resolves to its config: FedCAD's and FedSSD's FedAvg on CIFAR-10),
    the figures of their papers (drawn from whatever of their runs is shipped: a table's runs
    are often a figure's too), and the tables and figures shipped before on the same data and
    scale; a folder of a table or figure no paper declares (left from an older checkout) is
    named in a note and left alone."""
    folder = table_dir(shipped, "*", "*", manifest["scale"], copy).parent.parent
    before = [f"papers/{p.parent.name}/{p.name}" for p in sorted(folder.glob("*/*")) if p.is_dir()]
    for target in [t for t in before if not is_declared(t)]:
        print(
            f"note: {printable(folder / target.removeprefix('papers/'))} is no declared table or figure; left as it is"
        )
        before.remove(target)
    tables = [*manifest["targets"], *tables_reading(shipped / "runs", manifest["scale"], copy)]
    papers = dict.fromkeys(p for t in tables for p in target_parts(t)[:1] if p in paper_names())
    figures = [f"papers/{paper}/{name}" for paper in papers for name in paper_figures(paper)]
    return list(dict.fromkeys([*tables, *figures, *before]))


def tables_reading(runs: Path, scale: str, copy: Copy | None) -> list[str]:
    """Every declared table with a cell (on the copy's dataset) whose run is shipped in `runs`."""
    return [
        f"papers/{paper}/{name}"
        for paper in paper_names()
        for name, table in declared(paper, "TABLES").items()
        if any(
            holds_result(runs / cell.run_id)
            for cell in expand(copy_part(table, scale, copy) if copy else table, scale, copy_runtime(copy))
        )
    ]


def is_declared(target: str) -> bool:
    paper, name = target_parts(target)
    try:
        (get_figure if name.startswith("fig") else get_table)(paper, name)
    except (ConfigError, TargetError):
        return False
    return True


def import_state(args) -> int:
    """A run that fails its checks (shared/campaign/carried_runs.py) is named in one line and left out,
    the others imported (exit status 2 then); every path the state decides is checked to lie
    under results/ before anything is written."""
    # FILE is only read (its forms left as they are), a large checkpoint staged under --root's results/
    manifest, members = read_state(args.file, stage=args.root / RESULTS)
    shipped = args.root / SHIPPED
    copy = manifest_copy(manifest)
    members, refused = trusted_members(manifest, members)
    for line in refused:
        print(f"error: {printable(line)}", file=sys.stderr)
    for path in import_paths(manifest, members, args.root, copy):
        check_inside(path, args.root / RESULTS)
    remove_dead_temporaries(shipped)  # a killed import's listing
    progress = {k: v for k, v in members.items() if k.startswith("progress/")}
    # checkpoints first: a run a trainer holds (the likely refusal) is refused before anything is written
    restored = restore(progress, args.root / RUNS_DIR, shipped / "runs")
    shipping = ship(members, shipped / "runs")
    bad = name_unreadable(shipped / "runs")
    tables = [
        build(t, manifest["scale"], copy, shipped)
        for t in affected_tables(manifest, copy, shipped)
        if not needs_unreadable(t, manifest["scale"], copy, bad)
        for build in (build_shipped_table, build_shipped_figure)
    ]
    write_listing(shipped)
    kept = f" ({len(shipping['kept'])} shipped already, left as they were)" if shipping["kept"] else ""
    print(
        f"imported {args.file}: {len(shipping['shipped'])} runs shipped into {shipped / 'runs'}{kept}, "
        f"{len(restored['progress'])} checkpoints into {args.root / RUNS_DIR}; tables and figures: "
        f"{', '.join(str(t) for t in tables if t) or 'none (nothing of a table or figure finished)'}"
    )
    if manifest["scale"] != "paper":  # part of the report, after it: an error stays one line
        print(
            f"note: {printable(str(args.file))} holds {manifest['scale']}-scale runs (a rehearsal?), shipped into "
            f"{shipped} beside any paper-scale ones: import a rehearsal with --root into a scratch folder"
        )
    if getattr(args, "state", None):
        written = rewrite_campaign_state(args.state, args.root, manifest)
        print(f"campaign state {args.state}: {written.size / 2**20:.2f} MiB, the checkpoints of the runs in progress")
    return 2 if refused or bad else 0


def needs_unreadable(target: str, scale: str, copy: Copy | None, bad: dict[str, str]) -> bool:
    """Whether the target needs a shipped run that cannot be read (a note says so: it is not rebuilt)."""
    if not bad:
        return False
    needed = sorted(drawn_runs(target, scale, copy) & set(bad))
    if needed:
        print(f"note: {target} is not rebuilt: it needs shipped run {needed[0]}, which cannot be read")
    return bool(needed)


def rewrite_campaign_state(path: Path, root: Path, imported: dict):
    """A campaign's state (results/campaign/state.tar.gz) written anew once an import has put
    runs here: first its own checkpoints restored where this checkout holds fewer rounds (a
    fresh clone holds none), then every checkpoint of its runs in progress and none of its
    shipped runs, its targets, scale, data and --first as it had them (a new one: the imported
    state's). One state goes on, whichever machine advanced it last."""
    from shared.campaign.train import save

    args = argparse.Namespace(state=path, targets=[], scale=None, copy=None, root=root, first=None)
    members = state_defaults(args, owner=True)  # the state this command rewrites
    if not members:  # no campaign state yet: the imported state's campaign
        args.state_targets, args.scale = list(imported["targets"]), imported["scale"]
        args.copy_spec, args.first = manifest_copy(imported), imported.get(FIRST)
    restore({k: v for k, v in members.items() if k.startswith("progress/")}, root / RUNS_DIR, root / SHIPPED / "runs")
    args.part_mib = args.max_parts = None
    return save(args, root / RUNS_DIR)


def import_paths(manifest: dict, members: dict[str, bytes], root: Path, copy: Copy | None) -> list[Path]:
    """Every path `import` writes that the state decides: its runs' folders, its tables' folders."""
    shipped = root / SHIPPED
    runs = sorted({MEMBER.fullmatch(name).group(2) for name in members})
    tables = [
        table_dir(shipped, *parts, manifest["scale"], copy)
        for t in affected_tables(manifest, copy, shipped)
        if len(parts := target_parts(t)) == 2
    ]
    return [shipped / "README.md", *(d / rid for rid in runs for d in (shipped / "runs", root / RUNS_DIR)), *tables]
