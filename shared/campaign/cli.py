"""Paper-scale results that accumulate over short, offline GPU sessions.

    python -m shared.campaign train TARGET... --minutes M --state FILE [--scale S] [--copy NAME=FILE|SHA256]
                                              [--first rows=NAMES --first settings=NAMES --first seeds=N,...]
                                              [--device auto|cuda|cpu] [--data-root DIR] [--clients-per-step N]
                                              [--part-mib M] [--max-parts N] [--set KEY=VALUE ...] [--timing FILE]
                                              [--set-for CASE:KEY=VALUE ...] [--staging DIR] [--only RUN_ID ...]
                                              [--skip RUN_ID ...] [--failed-unit FILE]
    python -m shared.campaign status TARGET... [--state FILE] [--scale S] [--copy NAME=FILE|SHA256] [--first ...]
    python -m shared.campaign import FILE [--state CAMPAIGN_STATE]
    python -m shared.campaign bundle TARGET... -o DIR [--state FILE] [--copy NAME=FILE|SHA256]
                                              [--wheels-from DIR | --no-wheels] [--max-upload-mib M]

`train` trains the targets' missing runs in this process (no Snakemake, no network): seed 0 of
every cell first, so that a whole table exists with one seed as early as possible, then the
further seeds; the cells named with --first before all of them (kept in the state file). A run
stops between rounds, its checkpoint kept, when another round would pass the budget of M
minutes; FILE then holds the finished runs (config, metrics, per-round curves; no models) and
the checkpoints of the runs in progress (with the per-client state files they name), every
member checksummed; a kill at any step of a save leaves the earlier state or the new one
readable. Where a session can bring back only files of a size (a notebook's download, a job's
stage-out), a FILE larger than --part-mib X is written as FILE.part-00, FILE.part-01, ...; where
it can bring back only so many (--max-parts N), the finished runs are always kept, and the
checkpoints only while the state stays within N parts, the runs with most rounds done first; a
checkpoint left out is named in a one-line note (the run starts again), and a unit that could
not finish before the budget ends and whose checkpoints could not come back is not started.
Given an existing FILE, `train` continues from it, skipping the runs its ledger names (finished
elsewhere: shared/campaign/ledger.py). A unit takes as many of its runs as can finish in the
time left, its round estimated from measured rounds (shared/campaign/unit_sizing.py). `--set`
takes runtime keys only (a session's fallbacks: trainer.cuda_graphs=false,
trainer.deterministic=false), `--set-for CASE:KEY=VALUE` one for the runs whose method is a gate
case's (a session's verdict for one method: shared/campaign/gate_cases.py); `--timing FILE`
writes where each unit's seconds went (shared/campaign/session_timing.py). Within a unit, FILE
(and the timing) is rewritten at least once a minute of training; `--staging DIR` (a folder on
FILE's filesystem) takes the files being written before they are renamed beside FILE, so that a
folder returned as it is at any moment (a session killed from outside) never holds a
half-written one. `--failed-unit FILE`: a unit that raises stops `train` (exit 3) with the state
saved and its runs in FILE, so that a session retries it in a fresh process (`--only` its runs)
and trains the rest in another (`--skip` what failed twice).

`bundle` writes, where DIR holds no state yet (or one whose runs are all here), a state of the
ledger (the runs finished here or shipped) and the checkpoints of runs in progress that fit
--max-upload-mib beside the data and wheels (no limit by default), and refuses in one line
where the data and wheels alone pass it.

`import` verifies FILE, adds its finished runs to the shipped runs (results/shipped/runs/,
tracked: the workflow takes a shipped run as finished) without overwriting one, puts the
checkpoints into results/runs/ (where `train` and the workflow continue them), and rebuilds
the targets' tables, and every other table that reads a shipped run, from the shipped runs
into results/shipped/tables/, marked partial while cells or seeds are missing.

`--copy cifar10=FILE` trains on a copy of the official data (dataset.copy: the file's SHA-256,
so its runs have their own ids), and labels every table built from it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from shared.campaign.bundle import BUNDLED_STATE, bundle
from shared.campaign.ledger import LedgerError
from shared.campaign.ship import import_state, status
from shared.campaign.state import CAMPAIGN_STATE
from shared.campaign.state_reading import CampaignError
from shared.campaign.train import train
from shared.config.schema import ConfigError
from shared.data.catalog import DataError
from shared.runs.files import RunFilesError, printable
from shared.targets.resolve import TargetError


def add_session_options(t: argparse.ArgumentParser) -> None:
    """train's options that a GPU session (shared/campaign/session.py) gives."""
    t.add_argument("--only", action="append", metavar="RUN_ID", help="train these of the targets' runs only")
    t.add_argument("--skip", action="append", metavar="RUN_ID", help="leave these of the targets' runs out")
    t.add_argument(
        "--failed-unit",
        type=Path,
        metavar="FILE",
        help="where a unit raises: its runs into FILE (JSON), the state saved, exit 3 (a session retries it)",
    )
    t.add_argument(
        "--staging", type=Path, metavar="DIR", help="write the state and timing here before renaming them into place"
    )


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("targets", nargs="+", metavar="TARGET", help="papers/<paper>/<table|fig*>, as for Snakemake")
    p.add_argument("--scale", choices=["paper", "small", "smoke"], help="default: the state file's, else paper")
    p.add_argument("--copy", metavar="NAME=FILE|SHA256", help="train on a copy of dataset NAME (dataset.copy)")
    p.add_argument("--root", type=Path, default=Path("."), help="the project (default: .)")
    p.add_argument("--data-root", help="the data root (default: $FEDREPRO_DATA or ./data)")
    p.add_argument(
        "--first",
        action="append",
        metavar="KEY=NAMES",
        help="rows=NAME,..., settings=NAME,... or seeds=N,...: these cells before the rest "
        "(shared/campaign/first_cells.py; default: the state file's)",
    )


def add_train_parser(commands) -> None:
    t = commands.add_parser("train", help="train the targets' missing runs for M minutes")
    add_run_options(t)
    t.add_argument("--minutes", type=float, required=True)
    t.add_argument("--state", type=Path, required=True, help="the state file (continued if it exists)")
    t.add_argument("--device", default="auto", help="trainer.device (default: auto)")
    t.add_argument(
        "--clients-per-step",
        type=int,
        metavar="N",
        help="trainer.clients_per_step (default: on CUDA a round's clients in one step, elsewhere 1); "
        "2 or more trains groups in a batched step on a CPU too",
    )
    t.add_argument(
        "--part-mib",
        type=float,
        metavar="X",
        help="split a state file larger than X MiB into parts (default: one file)",
    )
    t.add_argument(
        "--max-parts",
        type=int,
        metavar="N",
        help="the files a session may return: checkpoints that would take more stay out (default: no limit)",
    )
    t.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a runtime key for every run (e.g. trainer.cuda_graphs=false); others would change run ids",
    )
    t.add_argument(
        "--set-for",
        action="append",
        metavar="CASE:KEY=VALUE",
        help="a runtime key, over --set's, for the runs whose method is a gate case's "
        "(e.g. fedssd-table2-MOON:trainer.clients_per_step=1; shared/campaign/gate_cases.py)",
    )
    t.add_argument("--timing", type=Path, metavar="FILE", help="write where each unit's seconds went (JSON)")
    add_session_options(t)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m shared.campaign", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_train_parser(commands)
    s = commands.add_parser("status", help="finished, in progress, missing, GPU-hours left")
    add_run_options(s)
    s.add_argument("--state", type=Path)
    i = commands.add_parser("import", help="verify a state file, ship its runs, rebuild their tables")
    i.add_argument("file", type=Path)
    i.add_argument(
        "--state",
        type=Path,
        help=f"then write this campaign state anew from here: its runs in progress, none shipped ({CAMPAIGN_STATE})",
    )
    i.add_argument("--root", type=Path, default=Path("."))
    b = commands.add_parser("bundle", help="data, wheels and state for an offline machine")
    add_run_options(b)
    b.add_argument("-o", "--output", type=Path, required=True)
    b.add_argument(
        "--state",
        type=Path,
        help=f"the state file to carry (default: {CAMPAIGN_STATE} where it exists, else DIR/{BUNDLED_STATE}, made)",
    )
    b.add_argument("--wheels-from", type=Path, help="copy wheels from this folder instead of pip download")
    b.add_argument("--no-wheels", action="store_true")
    b.add_argument(
        "--max-upload-mib",
        type=float,
        metavar="M",
        help="data, wheels and state together at most M MiB (default: no limit)",
    )
    b.add_argument("--part-mib", type=float, help=argparse.SUPPRESS)
    b.add_argument("--max-parts", type=int, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """0 on success, 1 if a run raised, 2 with one line on stderr for what is refused."""
    args = parser().parse_args(argv)
    try:
        return {"train": train, "status": status, "import": import_state, "bundle": bundle}[args.command](args)
    except (
        CampaignError,
        TargetError,
        RunFilesError,
        ConfigError,
        DataError,
        LedgerError,
        OSError,
        subprocess.CalledProcessError,
    ) as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 2
