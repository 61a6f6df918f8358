"""What one session of a campaign advanced: for each run it trained, the rounds before and after
and the seconds a round took, from the run's own per-round history (metrics.jsonl), so that a
log of sessions shows how far each run came and at what speed on which machine."""

from __future__ import annotations

import statistics
from pathlib import Path

from shared.config.schema import RunConfig
from shared.runs.files import RunFilesError, read_history


def history(run_dir: Path) -> list[dict]:
    """The run's per-round records (a torn last line left out); none where they cannot be read."""
    try:
        return read_history(run_dir) or []
    except (OSError, RunFilesError):
        return []


def rounds_now(runs_dir: Path, run_ids: list[str]) -> dict[str, int]:
    """The rounds each run's history holds here (0 for a run not started)."""
    return {rid: len(history(runs_dir / rid)) for rid in run_ids}


def advanced(before: dict[str, int], runs: dict[str, RunConfig], runs_dir: Path, names: dict[str, str]) -> list[str]:
    """One line per run that trained rounds since `before`: its name, rounds before and after,
    and the median seconds of the rounds this session trained."""
    lines = []
    for rid, start in before.items():
        records = history(runs_dir / rid)
        seconds = [r["seconds"] for r in records[start:] if isinstance(r.get("seconds"), (int, float))]
        if not seconds:
            continue
        total = runs[rid].federation.rounds
        finished = " (finished)" if (runs_dir / rid / "metrics.json").is_file() else ""
        name = names.get(rid) or f"{runs[rid].method['name']}, seed {runs[rid].seed}"
        lines.append(
            f"advanced: {name} (run {rid}): rounds {start} -> {len(records)} of {total}{finished}, "
            f"{statistics.median(seconds):.1f} s a round (median of {len(seconds)})"
        )
    return lines
