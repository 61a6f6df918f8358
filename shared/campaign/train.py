"""`train`: the targets' missing runs trained in units, each sized to the time left, until a
budget of minutes ends; the state file saved after each unit, within a unit at least every
REFRESH_SECONDS of training (shared/campaign/refresh.py), and on a SIGTERM."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Callable

from shared.campaign import session_progress, unit_sizing
from shared.campaign.carried_data import unpack_all
from shared.campaign.first_cells import chosen_cells
from shared.campaign.gate_cases import settings_by_method
from shared.campaign.ledger import BUNDLED, LEDGER
from shared.campaign.refresh import Refresh
from shared.campaign.runtime import clients_alone, resolved
from shared.campaign.session_timing import session_timing, stacks_if_overrun
from shared.campaign.state import (
    MAX_PARTS,
    RUNS_DIR,
    Written,
    carried_finished_size,
    expected_runs,
    member_bound,
    part_bytes,
    restore,
    state_defaults,
    state_exists,
    state_members,
    write_state,
)
from shared.campaign.state_reading import FIRST, CampaignError
from shared.config.schema import ConfigError, RunConfig
from shared.data.catalog import DataError, data_root, image_shape, num_classes
from shared.runs.files import holds_result, rounds_done, stage_elsewhere, write_atomically
from shared.runs.shipped import SHIPPED, is_finished
from shared.targets.copies import Copy, campaign_runs
from shared.targets.run_groups import form_groups
from shared.training.round_timing import observing

UNIT_FAILED = 3  # train's exit status where a unit raised and --failed-unit names it
GROUP_LIMIT = 15  # the largest group the campaign trains in one step: a table row's 5 settings x 3 seeds


def training_units(runs: dict[str, RunConfig], args) -> list[list[str]]:
    """Run ids in the order they train, in units that train together: the cells chosen with
    --first (shared/campaign/first_cells.py) before the rest, each part in `units_of`."""
    chosen = [c.run_id for c in getattr(args, "chosen", []) if c.run_id in runs]
    first = {rid: runs[rid] for rid in chosen}
    rest = {rid: cfg for rid, cfg in runs.items() if rid not in first}
    return units_of(first, args) + units_of(rest, args)


def units_of(runs: dict[str, RunConfig], args) -> list[list[str]]:
    """Run ids in the order they train, in units that train together: the groups of
    shared/targets/run_groups.py, each split into its first seed's runs and the further seeds', every
    group's first seed before any further seed (a table has one seed of every cell soonest).
    A group that cannot share a batched step on this device (`group_reason`: on a CPU, where
    one after another is faster) or must not (`clients_alone`) is units of one run."""
    from shared.training.group_training import group_reason

    groups = form_groups(runs, GROUP_LIMIT)
    first = min((cfg.seed for cfg in runs.values()), default=0)
    ordered = [[r for r in g if runs[r].seed == first] for g in groups] + [
        [r for r in g if runs[r].seed != first] for g in groups
    ]
    units = []
    for unit in filter(None, ordered):
        together = (
            len(unit) > 1
            and not any(clients_alone(runs[r], args) for r in unit)
            and group_reason([resolved(runs[r], args) for r in unit]) is None
        )
        units += [unit] if together else [[r] for r in unit]
    return units


def train_unit(
    rids: list[str], runs: dict[str, RunConfig], args, deadline: Callable[[], float] | float, runs_dir: Path
) -> list[str]:
    """One run, or a group in one batched step (shared/training/group_training.py); a group whose method
    or model cannot share a step (dropout, another optimizer than SGD, a method without the
    capabilities) trains one run after another, as the workflow's jobs do, a run that raises
    (said in one line) not keeping the others from training. Returns the runs that raised."""
    from shared.training import timed_rounds
    from shared.training.group_training import GroupRefused, run_group

    cfgs = [resolved(runs[rid], args) for rid in rids]
    if len(rids) > 1:
        try:
            run_group(cfgs, [runs_dir / rid for rid in rids], deadline=deadline)
            return []
        except GroupRefused as why:  # raised before any training
            print(f"note: {len(rids)} runs train one after another: {why}", file=sys.stderr, flush=True)
    raised = []
    for cfg, rid in zip(cfgs, rids):
        try:
            timed_rounds.run_timed(cfg, runs_dir / rid, deadline)
        except (timed_rounds.OutOfTime, ConfigError, DataError):  # out of time, or this machine cannot run it
            raise
        except Exception as exc:  # said with its traceback, then the next run: a session is too short to stop
            print(f"run {rid} raised {type(exc).__name__}: {exc}", file=sys.stderr)
            traceback.print_exc()
            raised.append(rid)
    return raised


def train_runs(runs: dict[str, RunConfig], args, end: float, runs_dir: Path, finished_size: int = 0) -> dict[str, int]:
    """Train the unfinished runs in order (`training_units`, each sized to the time left:
    `sized_units`) until `end` less the time the state takes to save (`Refresh.margin`); counts
    of what happened, by run. The first unit starts whatever its estimate (with nothing measured
    it may be far off; its progress is saved as it trains), unless its progress could not come
    back (`not_worth_starting`). finished_size: at least the bytes
    the finished runs take in the state file (`not_worth_starting` refuses a unit only where
    sure), then as each save measures them."""
    from shared.training.timed_rounds import OutOfTime

    counts = Counter()
    refresh = Refresh(lambda: save(args, runs_dir), getattr(args, "timing_record", None))

    def deadline() -> float:
        return end - refresh.margin()

    for rids, estimate in sized_units(runs, args, deadline(), runs_dir):
        first = not counts  # starts whatever its estimate (docstring)
        if not first and time.time() + estimate.seconds > deadline():
            counts["not started (no time for a round)"] += len(rids)
            break
        refused = not_worth_starting(rids, runs, args, deadline(), estimate.seconds, runs_dir, finished_size)
        if refused:
            counts["not started (could not finish, and its checkpoint cannot come back)"] += len(rids)
            print(refused, file=sys.stderr)
            continue
        raised = timed_unit(rids, runs, args, deadline, runs_dir, refresh, counts)
        if raised is None:  # stopped by the deadline
            break
        try:
            finished_size = refresh.save().finished_size
        except OutOfTime as exc:  # a SIGTERM during the save, handled once the state was written
            print(f"{exc}; after run(s) {' '.join(rids)}", file=sys.stderr)
            break
        if raised and stopped_for_retry(args, rids, raised, resolved(runs[rids[0]], args)):
            counts["unit failed"] += 1
            break
    return counts


def timed_unit(
    rids: list[str], runs: dict[str, RunConfig], args, deadline, runs_dir: Path, refresh, counts: Counter
) -> list[str] | None:
    """`train_unit`, timed (timing.json) and its progress saved as it trains (`refresh`): the runs
    that raised, or None where the deadline stopped it; what happened added to `counts`."""
    from shared.training.timed_rounds import OutOfTime

    timing, cfg = getattr(args, "timing_record", None), runs[rids[0]]
    with (
        timing.unit(rids, cfg.method["name"], cfg.model.name) if timing else contextlib.nullcontext() as unit,
        observing(refresh),
    ):
        try:
            raised = train_unit(rids, runs, args, deadline, runs_dir)  # the deadline as each save moves it
            counts += Counter(finished=len(rids) - len(raised), raised=len(raised))  # += keeps no zero
            if raised and unit:
                unit.outcome = f"raised in run(s) {' '.join(raised)}"
        except OutOfTime as exc:
            counts["stopped"] += len(rids)
            print(f"run(s) {' '.join(rids)}: {exc}", file=sys.stderr)
            if unit:
                unit.outcome = "stopped by the deadline"
            return None
        except (ConfigError, DataError):  # this machine cannot run it (no CUDA, no data): nor the others
            raise
        except Exception as exc:  # said with its traceback, then the next run: a session is too short to stop
            counts["raised"] += len(rids)
            raised = rids
            print(f"run(s) {' '.join(rids)} raised {type(exc).__name__}: {exc}", file=sys.stderr)
            traceback.print_exc()
            if unit:
                unit.outcome = f"raised {type(exc).__name__}: {exc}"
    return raised


def stopped_for_retry(args, rids: list[str], raised: list[str], trained: RunConfig) -> bool:
    """A unit raised: with --failed-unit, its runs into that file with the safe settings they
    trained with (`trained`: its first run's config; a session retries with a safer one), and
    training stops here (a CUDA error may leave this process unusable: a session retries the
    unit in a fresh one)."""
    if not getattr(args, "failed_unit", None):
        return False
    safe = {
        "trainer.cuda_graphs=false": not trained.trainer.cuda_graphs,
        "trainer.clients_per_step=1": trained.trainer.clients_per_step == 1,
    }
    record = json.dumps({"runs": rids, "raised": raised, "settings": [setting for setting, on in safe.items() if on]})
    write_atomically(args.failed_unit, lambda tmp: tmp.write_text(record))
    print(f"run(s) {' '.join(rids)}: stopped here, to be retried in a fresh process", file=sys.stderr)
    return True


def sized_units(runs: dict[str, RunConfig], args, deadline: float, runs_dir: Path):
    """(run ids, round estimate) of each unit in turn, its finished runs (here, shipped or in
    the ledger) left out, sized to the time left (`unit_sizing.size_unit`): the runs it leaves
    out come next as a unit of their own. Measured rounds are read again before each unit, so
    each unit trained counts for the next."""

    queue = training_units(runs, args)
    ledger = getattr(args, "ledger", frozenset())
    while queue:
        unit = [
            rid
            for rid in queue.pop(0)
            if rid not in ledger and not is_finished(rid, runs_dir, args.root / SHIPPED / "runs")
        ]
        if not unit:
            continue
        measured = unit_sizing.measured_rounds(runs, runs_dir, this_device(args.device))
        done = {rid: rounds_done(runs_dir / rid) for rid in unit}
        as_trained = {rid: resolved(runs[rid], args) for rid in unit}
        rids, estimate = unit_sizing.size_unit(unit, as_trained, done, deadline - time.time(), measured)
        if len(rids) < len(unit):
            queue.insert(0, [rid for rid in unit if rid not in rids])
            print(
                f"note: {len(rids)} of the unit's {len(unit)} runs train now, as they can finish in the time left "
                f"(a round about {estimate.seconds:.0f} s, {estimate.source})",
                file=sys.stderr,
            )
        yield rids, estimate


@functools.lru_cache(maxsize=4)
def this_device(device: str) -> str:
    """The name of the device --device trains on here, as its rounds record it."""
    from shared.runs.numerics import device_name, resolve_device

    return device_name(resolve_device(device))


def not_worth_starting(
    rids: list[str],
    runs: dict[str, RunConfig],
    args,
    deadline: float,
    round_seconds: float,
    runs_dir: Path,
    finished_size: int,
) -> str | None:
    """Why the unit is not started (None: it is): at `round_seconds` a round it cannot finish
    before the deadline, and its checkpoints, each at least its model's weights, would not fit
    beside the finished runs in what a session returns, so its GPU minutes would be lost."""
    rounds = max(runs[rid].federation.rounds - max(rounds_done(runs_dir / rid), 0) for rid in rids)
    seconds = rounds * round_seconds
    if time.time() + seconds <= deadline:
        return None
    checkpoints = [checkpoint_size(runs[rid], runs_dir / rid) for rid in rids]
    if not (args.max_parts and args.part_mib):  # no limit on what comes back: its checkpoints do
        return None
    if finished_size + member_bound(checkpoints) <= args.max_parts * part_bytes(args.part_mib):
        return None
    return (
        f"run(s) {' '.join(rids)} not started: {rounds} rounds (about {seconds / 60:.0f} min) cannot finish in the "
        f"{max(deadline - time.time(), 0) / 60:.1f} min left, and the checkpoints (at least "
        f"{sum(checkpoints) / 2**20:.1f} MiB) could not come back: {session_return(args)}"
    )


def checkpoint_size(cfg: RunConfig, run_dir: Path) -> int:
    """At least the bytes of the run's checkpoint once it has trained: the one there, or its
    model's weights, which every checkpoint holds (a method's state comes on top). A model
    whose shape only the data gives (text, image folders): the one there, or 0."""
    checkpoint = run_dir / "checkpoint.pt"
    there = checkpoint.stat().st_size if checkpoint.is_file() else 0
    shape, classes = image_shape(cfg), num_classes(cfg)
    if shape is None or classes is None:
        return there
    return max(there, weights_size(cfg.model.name, classes, *shape, cfg.model.projection_dim))


@functools.lru_cache(maxsize=16)
def weights_size(model: str, classes: int, channels: int, side: int, projection_dim: int | None) -> int:
    """The bytes of an image model's weights and buffers, as its state_dict holds them."""
    from shared.models.registry import build_model

    state = build_model(model, classes, channels, side, projection_dim).state_dict()
    return sum(t.numel() * t.element_size() for t in state.values())


@functools.lru_cache(maxsize=8)
def state_run_ids(targets: tuple[str, ...], scale: str, copy: Copy | None) -> tuple[str, ...]:
    """The runs a state file holds, expanded once per process: `train` saves after every run."""
    return tuple(expected_runs(targets, scale, copy))


def save(args, runs_dir: Path) -> Written:
    """The state file: the runs of its earlier targets and of this command's, the checkpoints
    that a session could return (`write_state`); not the runs shipped in this checkout, whose text
    lives in results/shipped/ already (a campaign's state stays the size of its runs in progress)."""
    shipped_runs = args.root / SHIPPED / "runs"
    run_ids = [
        rid
        for rid in state_run_ids(tuple(args.state_targets), args.scale, args.copy_spec)
        if not holds_result(shipped_runs / rid)
    ]
    ledger = getattr(args, "ledger", frozenset())
    about = {
        "targets": args.state_targets,
        "scale": args.scale,
        "copy": dataclasses.asdict(args.copy_spec) | {"path": None} if args.copy_spec else None,
        **({LEDGER: sorted(ledger)} if ledger else {}),
        **({BUNDLED: True} if getattr(args, "bundling", False) else {}),
        **({FIRST: args.first} if getattr(args, "first", None) else {}),
    }
    members = state_members(run_ids, runs_dir, ledger, getattr(args, "carried_rounds", None))
    with sigterm_deferred():
        return write_state(args.state, members, about, args.part_mib, args.max_parts)


def session_return(args) -> str:
    return (
        f"a session returns {args.max_parts} files of {args.part_mib:g} MiB (--max-parts, --part-mib)"
        if args.part_mib
        else f"a session returns {args.max_parts} file(s) (--max-parts)"
    )


def tell_left_out(args, written: Written) -> None:
    """One line for each checkpoint the state file leaves out, and one where even its finished
    runs pass what a session returns."""
    for run in written.left_out:
        print(
            f"note: run {run.run_id}'s checkpoint ({run.size / 2**20:.1f} MiB, {run.rounds} rounds) is left out of "
            f"{args.state}, as the session could not return it ({session_return(args)}): the run starts again from "
            f"round 0 unless this machine still holds {args.root / RUNS_DIR / run.run_id}",
            file=sys.stderr,
        )
    if args.max_parts and written.files > args.max_parts:
        print(
            f"warning: {args.state} takes {written.files} files ({written.size / 2**20:.1f} MiB) with its finished "
            f"runs alone, and {session_return(args)}: a session cannot return the whole state",
            file=sys.stderr,
        )


@contextlib.contextmanager
def sigterm_deferred():
    """A SIGTERM while the state file is written is handled once it is written: stopping then
    leaves one whole state, not a file and parts side by side."""
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
    if received:
        signal.raise_signal(signal.SIGTERM)


def stop_on_sigterm() -> None:
    """SIGTERM (a scheduler's, or `timeout`'s, when a round overran the budget) stops the run
    in progress as the budget would: its last checkpoint goes into the state file."""
    from shared.training.timed_rounds import OutOfTime

    def stop(signum, frame):
        raise OutOfTime("stopped by SIGTERM; the state keeps its last round's checkpoint")

    signal.signal(signal.SIGTERM, stop)


def check_parts(args) -> None:
    """--part-mib and --max-parts, refused in one line before anything trains or is written."""
    if args.part_mib is not None and not args.part_mib > 0:
        raise CampaignError(f"--part-mib {args.part_mib:g}: a part must hold more than 0 MiB")
    if args.max_parts is not None and not 1 <= args.max_parts <= MAX_PARTS:
        raise CampaignError(
            f"--max-parts {args.max_parts}: a session must return at least the state's one file, "
            f"and parts are numbered 00-{MAX_PARTS - 1}"
        )


def chosen_runs(runs: dict[str, RunConfig], args) -> dict[str, RunConfig]:
    """--only's runs (none given: all) less --skip's: a session's retry of a unit that failed,
    or the rest once a unit has failed twice."""
    only, skip = set(getattr(args, "only", None) or ()), set(getattr(args, "skip", None) or ())
    return {rid: cfg for rid, cfg in runs.items() if (not only or rid in only) and rid not in skip}


def train(args) -> int:
    from shared.targets.runtime_settings import parse_settings

    started = time.time()  # before torch's import: a session's deadline counts from its launch
    check_parts(args)
    if getattr(args, "staging", None) is not None:  # the state and timing.json: their folder never holds a temporary
        for written_beside in {args.state.parent, *([args.timing.parent] if args.timing else [])}:
            stage_elsewhere(written_beside, args.staging)
    args.settings = parse_settings(args.set)  # each run's, with a CPU's defaults: shared/campaign/runtime.py
    args.by_method = settings_by_method(getattr(args, "set_for", None), args.targets)
    stop_on_sigterm()
    end = started + 60 * args.minutes
    members = state_defaults(args, owner=True)  # the state this command writes: it sets an older form aside
    runs_dir = args.root / RUNS_DIR
    runs, skipped = campaign_runs(args.targets, args.scale, args.copy_spec)
    runs = chosen_runs(runs, args)
    args.chosen = chosen_cells(args.first, args.state_targets, args.scale, args.copy_spec)
    if args.copy_spec is not None:  # missing data is said before anything is restored or trains
        from shared.data.catalog import COPIES, find_copy

        unpack_all(data_root(args.data_root) / COPIES)  # a bundle's packed copy, where train runs without a session
        find_copy(data_root(args.data_root), args.copy_spec.sha256)
    if state_exists(args.state):
        restored = restore(members, runs_dir, args.root / SHIPPED / "runs")
        here = f" ({len(restored['kept'])} as far here already)" if restored["kept"] else ""
        print(
            f"continuing from {args.state}: {len(restored['finished'])} finished and "
            f"{len(restored['progress'])} checkpointed runs restored{here}"
        )
    carried = carried_finished_size(args.state, members) if state_exists(args.state) else 0

    before = session_progress.rounds_now(runs_dir, list(runs))
    with session_timing(args.timing, args.device) as args.timing_record, stacks_if_overrun(end):
        counts = train_runs(runs, args, end, runs_dir, carried)
    for line in session_progress.advanced(before, runs, runs_dir, {c.run_id: c.name for c in args.chosen}):
        print(line)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the command ends after this save: a SIGTERM stops nothing more
    written = save(args, runs_dir)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    tell_left_out(args, written)
    finished = sum(rid in args.ledger or is_finished(rid, runs_dir, args.root / SHIPPED / "runs") for rid in runs)
    print(
        f"{finished} of {len(runs)} runs finished ({', '.join(f'{n} {k}' for k, n in counts.items()) or 'none trained'}"
        f"{f'; {skipped} need other data than the copy' if skipped else ''}) in {(time.time() - started) / 60:.1f} "
        f"min; state {args.state}: {written.size / 2**20:.2f} MiB"
    )
    return UNIT_FAILED if counts["unit failed"] else 1 if counts["raised"] else 0
