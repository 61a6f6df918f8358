"""One GPU session of the campaign, in one command (scripts/gpu-session.sh runs it):

    python -m shared.campaign.session OUTDIR TARGET... --minutes M [--scale S] [--device D] [--carry DIR]
                                 [--max-files N] [--max-file-mib X] [--max-total-mib T] [--set KEY=VALUE ...]

In this order, each step writing into OUTDIR as it goes, so that a session killed at its
deadline still returns what it did:

    environment.json    Python, packages, torch, CUDA, the GPU, nvidia-smi's report (seconds); then
                        the carried state and data checked (shared/campaign/session_checks.py): a
                        bundle that cannot serve the session ends it in one line, exit 2
    gate.xml            at most 90 s of the gpu tests on the campaign's path, as JUnit XML, and its
                        verdict, which sets what training may use (shared/campaign/gate.py); with
                        no CUDA device to test, a report of no tests saying why
    state.tar.gz        `python -m shared.campaign train` of the targets from the carried state
                        (DIR/state.tar.gz, `bundle`) and data (DIR/data) until M minutes less
                        END_SECONDS, with the gate's settings, the state (or its parts) rewritten
                        at least once a minute of training (shared/campaign/refresh.py)
    timing.json         per unit: runs, lanes, steps, useful share, seconds per round by phase,
                        peak GPU memory, GPU utilisation every 10 s (shared/campaign/session_timing.py)
    session.log         every step's output, within its share of the limits (its first and last lines
                        kept, shared/campaign/session_output.py)

Each file but session.log (appended line by line) is written outside OUTDIR (`staging_folder`)
and renamed into it whole: OUTDIR, as it is at any moment, holds no half-written file. OUTDIR
then holds these files only: at most --max-files (the state takes what the other four leave) of
at most --max-file-mib each, at most --max-total-mib in all (default: no limit). Needs neither Snakemake nor network:
the checkout (tests/ for the gate) and the machine's Python with torch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from shared.campaign.gate import SAFEST, Verdict, gate
from shared.campaign.session_checks import Carried, CarryError, carried_source, check_carry
from shared.campaign.session_output import NAMED_FILES, Log, state_limits, total_mib
from shared.campaign.session_timing import TIMING_FORMAT
from shared.campaign.state import RUNS_DIR, expected_runs
from shared.campaign.state_reading import CampaignError
from shared.campaign.train import UNIT_FAILED
from shared.runs.files import stage_elsewhere, temporary_path, write_atomically
from shared.runs.shipped import SHIPPED, is_finished

STARTED = time.monotonic()  # the session's clock starts with the command, not once its input is checked
REPO = Path(__file__).resolve().parents[2]
# torch's import and nvidia-smi, the carry's checks after it: on a fresh GPU machine a first import
# of torch with its CUDA libraries and CUDA's start take tens of seconds, in a rehearsal seconds
ENVIRONMENT_SECONDS = 60
END_SECONDS = 5  # kept free after training: the last lines, the listing of OUTDIR (a second)
STOP_SECONDS = 20  # what a SIGTERM'd step gets to write its files before it is killed
STATE = "state.tar.gz"


class SessionError(Exception):
    """Refused input; the message is one line."""


def child_env(device: str) -> dict:
    """A child sees this checkout first, whatever the caller's PYTHONPATH. A rehearsal on a CPU
    (--device cpu) trains with one torch thread unless OMP_NUM_THREADS says otherwise: on cores
    that other work keeps busy, torch's threads wait on each other (a smoke round measured 3-4 s
    with one thread and over 140 s with two, on 2 cores under a load of 6)."""
    threads = {"OMP_NUM_THREADS": "1"} if device == "cpu" and "OMP_NUM_THREADS" not in os.environ else {}
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "PYTHONUNBUFFERED": "1",
        **threads,
    }


class Session:
    """The session's clock, its log and the step running now (stopped on SIGTERM)."""

    def __init__(self, args):
        self.args, self.out = args, args.out
        self.deadline = STARTED + 60 * args.minutes
        self.staging = staging_folder(self.out)
        if self.staging is not None:
            stage_elsewhere(self.out, self.staging)
        self.limits = state_limits(args)
        self.log, self.child = Log(self.out / "session.log", self.limits.log_bytes), None
        self.source = carried_source(args.carry)  # the checkout's commit, which the steps' runs record

    def written_elsewhere(self, name: str) -> Path:
        """Where a step writes OUTDIR's file `name` before `publish` renames it into OUTDIR."""
        return temporary_path(self.out / name)

    def publish(self, name: str) -> None:
        """OUTDIR's file `name`, as written where `written_elsewhere` said, if it was."""
        written = self.written_elsewhere(name)
        if written.is_file():
            os.replace(written, self.out / name)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, command: list[str], seconds: float, stop=signal.SIGINT, env: dict | None = None) -> int | None:
        """Run a step with its output in the log; its exit status, None where it ran past
        `seconds` (then `stop`: ^C, on which pytest still writes its report; SIGTERM, on which
        train writes its state) and killed STOP_SECONDS later if still running."""
        self.log.line(f"$ {' '.join(command)}  (at most {max(seconds, 0):.0f} s)")
        self.child = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**self.source, **child_env(self.args.device), **(env or {})},
            cwd=REPO,
            errors="replace",
        )
        reader = threading.Thread(target=lambda: [self.log.line(line) for line in self.child.stdout], daemon=True)
        reader.start()
        try:
            code = self.child.wait(timeout=max(seconds, 1))
        except subprocess.TimeoutExpired:
            code = self.stop_child(stop)
            self.log.line(f"stopped after {seconds:.0f} s (the session's time for this step)")
            code = None
        reader.join(timeout=5)
        self.child = None
        return code

    def stop_child(self, stop=signal.SIGTERM) -> int:
        child = self.child
        if child is None or child.poll() is not None:
            return child.returncode if child is not None else 0
        child.send_signal(stop)
        try:
            return child.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()


def staging_folder(out: Path) -> Path | None:
    """A folder outside OUTDIR on its filesystem (a rename into OUTDIR is then atomic) where
    OUTDIR's files are written before they are renamed into it, so that OUTDIR, returned as it
    is when the session is killed from outside, never holds a half-written file; emptied of an
    earlier session's leftovers. None where there is none: the files are then written hidden in
    OUTDIR before the rename."""
    for candidate in (out.parent / f".{out.name}.staging", REPO / "results" / f".staging-{out.name}"):
        try:
            shutil.rmtree(candidate, ignore_errors=True)
            candidate.mkdir(parents=True)
        except OSError:  # a folder this machine does not let us write
            continue
        if candidate.stat().st_dev == out.stat().st_dev:
            return candidate
        candidate.rmdir()
    return None


def gate_order(session: Session, carried: Carried) -> list[str]:
    """The gate's method cases in the order this session trains them (`cases_in_turn`): the
    cells of the state's --first first, then the campaign's order; its carried state's finished
    runs, or this checkout's shipped ones, are not trained again. Where that cannot be worked
    out, the cases' own order: it saves the gate's time, and is never a reason to train nothing."""
    from shared.campaign.first_cells import chosen_cells
    from shared.campaign.gate_cases import GATE_DATASET, cases_in_turn, method_cases

    targets = session.args.targets
    try:
        runs = expected_runs(tuple(targets), carried.scale, carried.copy)
        first = [c.run_id for c in chosen_cells(carried.first, targets, carried.scale, carried.copy)]
        in_turn = {rid: runs[rid] for rid in first if rid in runs} | runs
        here, shipped = REPO / RUNS_DIR, REPO / SHIPPED / "runs"  # as train finds them (it runs in REPO)
        return cases_in_turn(
            method_cases(targets, GATE_DATASET),
            in_turn,
            lambda rid: rid in carried.finished or is_finished(rid, here, shipped),
        )
    except Exception as exc:  # any: an order is worth no session (the docstring)
        session.log.line(f"gate: its cases in their own order ({type(exc).__name__}: {exc})")
        return []


def carried_state(session: Session) -> None:
    """The carried state (or its parts) into OUTDIR, where train continues it and rewrites it
    after every unit: OUTDIR holds a readable state at every moment."""
    carry = session.args.carry
    for part in sorted(carry.glob(f"{STATE}*")):
        if part.name == STATE or re.fullmatch(rf"{re.escape(STATE)}\.part-[0-9][0-9]", part.name):
            shutil.copy2(part, session.written_elsewhere(part.name))
            session.publish(part.name)
    if not any(session.out.glob(f"{STATE}*")):
        session.log.line(f"no carried state in {carry}: train starts a new one (--scale, --copy as given)")


def train_with_retries(session: Session, settings: list[str], settings_for: list[str] = ()) -> int | None:
    """`train`; where a unit raises (a CUDA error may leave the process unusable: train stops,
    UNIT_FAILED), that unit once more in a fresh process with the next safer settings (`safer`),
    then the rest in another with the settings as they were; a unit that fails again is left
    out of the rest. A failing unit never stops the others."""
    left_out: list[str] = []
    while True:
        code = train(session, settings, settings_for, skip=left_out)
        failed, trained_with = failed_unit(session)
        if code != UNIT_FAILED or failed is None:
            return code
        retry = safer(settings, trained_with)
        session.log.line(
            f"run(s) {' '.join(failed)} raised: "
            + (f"once more, in a fresh process, with {retry[-1]}" if retry else "left out: the settings are the safest")
        )
        if retry is None or train(session, retry, settings_for, only=failed, skip=left_out) == UNIT_FAILED:
            left_out += failed


def verdict_settings(session: Session, verdict: Verdict) -> tuple[list[str], list[str]]:
    """train's --set and --set-for after the gate's verdict; per-method settings that train
    would refuse (no case of the targets: never expected) are never a reason to train nothing:
    every run then trains with the safest settings, recorded as machinery's."""
    from shared.campaign.gate_cases import settings_by_method
    from shared.targets.resolve import TargetError

    try:
        settings_by_method(verdict.settings_for(), session.args.targets)
    except (CampaignError, TargetError, ValueError) as exc:
        session.log.line(f"gate: its per-method settings are refused ({exc}): every run trains with the safest")
        return [*session.args.set, *Verdict("machinery", str(exc)).settings()], []
    return [*session.args.set, *verdict.settings()], verdict.settings_for()


def safer(settings: list[str], trained_with: list[str]) -> list[str] | None:
    """The settings a unit that raised is retried with: CUDA graphs off, else clients one after
    another, over those it trained with (its method's --set-for's included: train says them;
    None: those are the safest already)."""
    step = next((s for s in SAFEST if s not in settings and s not in trained_with), None)
    return [*settings, *(s for s in trained_with if s not in settings), step] if step else None


def failed_unit(session: Session) -> tuple[list[str] | None, list[str]]:
    """The runs of the unit that made train stop and the safe settings they trained with (its
    --failed-unit file, then removed)."""
    path = session.written_elsewhere("failed-unit.json")
    try:
        record = json.loads(path.read_text())
        runs, settings = record["runs"], record.get("settings", [])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, []
    finally:
        path.unlink(missing_ok=True)
    settings = [s for s in settings if s in SAFEST] if isinstance(settings, list) else []
    return (runs if isinstance(runs, list) and runs and all(isinstance(r, str) for r in runs) else None), settings


def train(
    session: Session, settings: list[str], settings_for: list[str] = (), only: list[str] = (), skip: list[str] = ()
) -> int | None:
    """`campaign train` (of `only`'s runs, where given, less `skip`'s) until the session's end
    less END_SECONDS (train keeps its own margin to write the state), SIGTERM'd should a round
    overrun (the state then written within STOP_SECONDS, at worst past the session's end by that
    much less END_SECONDS)."""
    args = session.args
    seconds = session.left() - END_SECONDS
    if seconds < 30:
        session.log.line(f"train: not started, {session.left():.0f} s left")
        return None
    session.written_elsewhere("failed-unit.json").unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "shared.campaign",
        "train",
        *args.targets,
        "--minutes",
        f"{seconds / 60:.3f}",
        "--state",
        str(session.out / STATE),
        "--data-root",
        str(args.carry / "data"),
        "--device",
        args.device,
        "--timing",
        str(session.out / "timing.json"),
        *(["--max-parts", str(session.limits.state_parts)] if session.limits.state_parts else []),
        *(["--part-mib", f"{session.limits.part_mib:g}"] if session.limits.part_mib else []),
        *(["--scale", args.scale] if args.scale else []),
        *(["--staging", str(session.staging)] if session.staging else []),
        *(f"--set={s}" for s in settings),
        *(f"--set-for={s}" for s in settings_for),
        *(f"--only={rid}" for rid in only),
        *(f"--skip={rid}" for rid in skip),
        f"--failed-unit={session.written_elsewhere('failed-unit.json')}",
    ]
    return session.run(command, seconds + 5, stop=signal.SIGTERM)


def finish(session: Session) -> bool:
    """timing.json where train wrote none; the listing of OUTDIR against the limits."""
    args, timing = session.args, session.out / "timing.json"
    if not timing.is_file():
        record = {
            "format": TIMING_FORMAT,
            "device": args.device,
            "units": [],
            "gpu": None,
            "note": "no unit trained in this session (session.log says why)",
        }
        write_atomically(timing, lambda tmp: tmp.write_text(json.dumps(record, indent=1) + "\n"))
    files = sorted(p for p in session.out.iterdir() if p.is_file())
    sizes = [p.stat().st_size for p in files]
    total = total_mib(args)
    within = (
        (not args.max_files or len(files) <= args.max_files)
        and (not args.max_file_mib or max(sizes, default=0) <= args.max_file_mib * 2**20)
        and (not total or sum(sizes) + 2**16 <= total * 2**20)  # 64 KiB: this line and the log's last
    )
    limits = ", ".join(
        f"{flag} {value:g}" if value else f"{flag} none"
        for flag, value in (
            ("--max-files", args.max_files),
            ("--max-file-mib", args.max_file_mib),
            ("--max-total-mib", total),
        )
    )
    session.log.line(
        f"{session.out}: {len(files)} files ({', '.join(p.name for p in files)}), the largest "
        f"{max(sizes, default=0) / 2**20:.2f} MiB, {sum(sizes) / 2**20:.2f} MiB in all; "
        f"{'within' if within else 'OVER'} {limits}"
    )
    return within


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/gpu-session.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, metavar="OUTDIR", help="where the session's files go (empty or new)")
    p.add_argument("targets", nargs="+", metavar="TARGET", help="papers/<paper>/<table|fig*>")
    p.add_argument("--minutes", type=float, required=True, help="the whole session, every step in it")
    p.add_argument("--scale", choices=["paper", "small", "smoke"], help="default: the carried state's, else paper")
    p.add_argument("--device", default="auto", help="trainer.device (default: auto)")
    p.add_argument("--carry", type=Path, default=Path(".carry"), help="the bundle: data, state (default: .carry)")
    p.add_argument("--max-files", type=int, metavar="N", help="OUTDIR's files at most (default: no limit)")
    p.add_argument("--max-file-mib", type=float, metavar="X", help="each file at most X MiB (default: no limit)")
    p.add_argument("--max-total-mib", type=float, metavar="T", help="all files together at most T MiB (default: N x X)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a runtime key for every run")
    return p


def check(args) -> None:
    """Refused in one line, before anything is written."""
    from shared.targets.runtime_settings import parse_settings

    if not args.minutes > 0:
        raise SessionError(f"--minutes {args.minutes:g}: a session needs some minutes")
    if args.max_files is not None and not len(NAMED_FILES) < args.max_files <= len(NAMED_FILES) + 100:
        raise SessionError(
            f"--max-files {args.max_files}: {len(NAMED_FILES)} files ({', '.join(NAMED_FILES)}) "
            f"and at least one for the state, at most 100 state parts"
        )
    if args.max_file_mib is not None and not args.max_file_mib >= 0.1:
        raise SessionError(f"--max-file-mib {args.max_file_mib:g}: a file of at least 0.1 MiB")
    if args.max_total_mib is not None and not args.max_total_mib > 0:
        raise SessionError(f"--max-total-mib {args.max_total_mib:g}: some MiB must come back")
    state_limits(args)  # ValueError: a total that leaves the state nothing
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise SessionError(f"{args.out} is not an empty folder: the session's files must be all it holds")
    parse_settings(args.set)  # a key that would change run ids is refused here, not minutes later
    try:
        expected_runs(tuple(args.targets), args.scale or "paper", None)  # cached: the carry's check reads them again
    except (
        Exception
    ) as exc:  # an unknown target: what shared.targets.resolve and shared.targets.table_declarations raise, in one line
        raise SessionError(f"{' '.join(args.targets)}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    """0: trained (or rehearsed) within the limits; 1: the gate failed, a step failed, or a
    limit was passed; 2: refused input or a bundle that cannot serve the session (one line)."""
    args = parser().parse_args(argv)
    try:
        check(args)
    except (SessionError, ValueError) as exc:  # ValueError: ConfigError from --set, or state_limits' refusal
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out, args.carry = args.out.resolve(), args.carry.resolve()  # the steps run in the checkout
    args.out.mkdir(parents=True, exist_ok=True)
    session = Session(args)
    # killed at its deadline: the step's own files written (stop_child), timing.json too
    signal.signal(signal.SIGTERM, lambda signum, frame: (session.stop_child(), finish(session), sys.exit(143)))
    try:
        return run_session(session)
    finally:
        session.log.close()
        if session.staging is not None:  # its steps have ended: nothing more is written there
            shutil.rmtree(session.staging, ignore_errors=True)


def run_session(session: Session) -> int:
    args, started = session.args, time.monotonic()
    session.log.line(f"session: {' '.join(args.targets)} for {args.minutes:g} min on --device {args.device}")
    code = session.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from shared.campaign.session_checks import environment_record as e; "
            "print(e(Path(sys.argv[1]))['cuda_available'])",
            str(session.written_elsewhere("environment.json")),
        ],
        ENVIRONMENT_SECONDS,
        stop=signal.SIGKILL,  # a record cut short is no record: nothing to wait for
    )
    session.publish("environment.json")
    env = json.loads((session.out / "environment.json").read_text()) if code == 0 else {}
    if code != 0:  # the gate then asks torch itself: a GPU is never left untested for want of this record
        why = f"stopped after {ENVIRONMENT_SECONDS} s" if code is None else f"exit {code}"
        session.log.line(f"environment: no record ({why}); the gate runs where --device is not cpu")
    try:  # before anything costly: a bundle that cannot serve the session is said now, in one line
        carried = check_carry(args.carry, args.targets, args.scale)
    except CarryError as exc:
        session.log.line(f"error: {exc}", stream=sys.stderr)
        return 2
    args.scale = carried.scale
    cuda = bool(env.get("cuda_available", code != 0)) and args.device != "cpu"
    verdict = gate(session, cuda, args.targets, gate_order(session, carried) if cuda else [])
    carried_state(session)
    # the verdict's settings have the last word, and every run records its verdict beside them
    trained = train_with_retries(session, *verdict_settings(session, verdict))
    within = finish(session)
    session.log.line(
        f"session ended after {time.monotonic() - started:.0f} s: gate {verdict.overall}"
        + "".join(f", {case} {found}" for case, (found, _) in verdict.cases.items())
        + f", train exit {trained}"
    )
    return 0 if within and verdict.clean and trained in (0, None) and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
