"""What a campaign session receives besides the data and the checkout, kept small: a ledger.

A state file's manifest may hold `"ledger"`: the sorted ids of the runs finished elsewhere
(shipped, or finished on the machine that bundled it), which `train` skips, in place of the
finished runs' text (that lives in results/shipped/ once imported, and never travels out again).
Beside it the state carries the checkpoints of runs in progress that fit the upload limit
(`bundle --max-upload-mib`), the most advanced first. The state a session returns holds the
runs it finished and the checkpoints it advanced, so what travels each way does not grow with
the campaign.
"""

from __future__ import annotations

from shared.runs.files import RUN_ID

LEDGER = "ledger"  # the manifest's key
# The manifest's mark (true) of a state `bundle` wrote, whose checkpoints are also at home: the
# state a session returns from it holds only the checkpoints that session advanced. A state a
# session wrote has no mark, so one carried on unimported keeps every checkpoint it holds.
BUNDLED = "bundled"


class LedgerError(ValueError):
    """An upload limit a bundle cannot keep; the message is one line."""


def ledger_problem(ledger) -> str | None:
    """Why a manifest's ledger is not a sorted list of distinct run ids; None where it is
    (shared/campaign/state_reading.py asks when it reads a state)."""
    if not isinstance(ledger, list) or not all(isinstance(r, str) and RUN_ID.fullmatch(r) for r in ledger):
        return f"{LEDGER} is not a list of run ids (16 lowercase hex digits)"
    return None if ledger == sorted(set(ledger)) else f"{LEDGER} is not sorted, or names a run twice"


def read_ledger(manifest: dict) -> frozenset[str]:
    """The run ids a state's manifest says are finished elsewhere (none without a ledger); the
    manifest was checked when its state was read (`ledger_problem`)."""
    return frozenset(manifest.get(LEDGER, []))


def advanced(rid: str, rounds_here: int, carried_rounds: dict[str, int]) -> bool:
    """A run in progress that this session moved on: not carried in, or further than carried."""
    return rounds_here > carried_rounds.get(rid, -1)


STATE_ROOM = 128 * 1024  # at least what a state of a ledger and its manifest take (the manifest of 500 runs)


def upload_budget(limit_mib: float | None, other_bytes: int) -> int | None:
    """The bytes left for the state under the upload limit beside the data and wheels (None:
    no limit); LedgerError in one line where they leave no room for a state (STATE_ROOM)."""
    if limit_mib is None:
        return None
    limit = int(limit_mib * 2**20)
    if other_bytes + STATE_ROOM > limit:
        raise LedgerError(
            f"--max-upload-mib {limit_mib:g}: the data and wheels take {other_bytes / 2**20:.1f} MiB, "
            f"leaving less than the {STATE_ROOM // 1024} KiB a state needs"
        )
    return limit - other_bytes


def state_parts(budget: int, part_bytes: int) -> tuple[float, int]:
    """(part MiB, parts) that hold at most `budget` bytes in parts of at most part_bytes."""
    parts = -(-budget // part_bytes)
    return budget / parts / 2**20, parts
