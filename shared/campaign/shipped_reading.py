"""The shipped tree (results/shipped/, tracked) read as a state is: its files may come from any
clone that pushed, so each is read as if an adversary wrote it.

- a shipped run: its files regular files (a link could point at a secret, which a restore would
  copy into results/runs/ and `archive pack` into an archive, or at an endless device), each
  within the size a state allows it, and then the checks `import` makes of a finished run
  (shared/campaign/carried_runs.py: its identity, its schema, its summary against its history);
- a shipped table's entry in the listing: its provenance.yaml and comparison.md read within
  limits, as plain YAML and text, and a folder that does not read named instead.

`campaign import` and `status` name each shipped run that fails in one line, with the `git rm`
that removes it; the workflow restores a shipped run only once it passes (workflow/rules/runs.smk).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import yaml

from shared.campaign.state_reading import member_limit
from shared.runs.files import MAX_SMALL_BYTES, RUN_FILES, megabytes, printable, read_at_most
from shared.runs.strict_text import strict_yaml


def regular_bytes(path: Path, limit: int) -> bytes:
    """A regular file's bytes (never through a link), at most `limit`; ValueError in one line else."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"its {path.name} is not a regular file (a link, a folder or a device)")
    if info.st_size > limit:
        raise ValueError(f"its {path.name} holds {megabytes(info.st_size)}, over the limit of {megabytes(limit)}")
    data = read_at_most(path, limit, follow_links=False)
    if data is None:
        raise ValueError(f"its {path.name} changed as it was read (past the limit of {megabytes(limit)}, or no file)")
    return data


def shipped_files(run_dir: Path) -> dict[str, bytes]:
    """A shipped run's files (those of RUN_FILES it has) as a state holds them; ValueError in one line else."""
    if run_dir.is_symlink() or not run_dir.is_dir():
        raise ValueError("its folder is a link, or no folder")
    return {
        name: regular_bytes(run_dir / name, member_limit(f"finished/{run_dir.name}/{name}"))
        for name in RUN_FILES
        if os.path.lexists(run_dir / name)
    }


def shipped_run_problem(run_dir: Path) -> str | None:
    """Why a shipped run may not count as finished (None: it may): the checks `import` makes."""
    from shared.campaign.carried_runs import finished_problem
    from shared.campaign.state_reading import run_config

    try:
        files = shipped_files(run_dir)
    except (OSError, ValueError) as exc:
        return str(exc)
    cfg = run_config(files["config.yaml"]) if "config.yaml" in files else None
    return "its config.yaml is not a run's config" if cfg is None else finished_problem(run_dir.name, files, cfg)


def unreadable_shipped(shipped_runs: Path) -> dict[str, str]:
    """run id -> why, for each shipped run that fails `shipped_run_problem` (shipped by hand, by an
    older version, or tampered with)."""
    bad = {}
    for run_dir in sorted(p.parent for p in shipped_runs.glob("*/metrics.json")):
        problem = shipped_run_problem(run_dir)
        if problem:
            bad[run_dir.name] = problem
    return bad


def name_unreadable(shipped_runs: Path) -> dict[str, str]:
    """`unreadable_shipped`, each named in one line with how to remove it."""
    bad = unreadable_shipped(shipped_runs)
    for rid, problem in bad.items():
        print(
            f"error: shipped run {printable(rid)} cannot be read ({printable(problem)}); it is left out: remove it "
            f"with git rm -r {printable(shipped_runs / rid)}",
            file=sys.stderr,
        )
    return bad


def listing_entry(shipped: Path, path: Path) -> str:
    """A shipped table's (or figure's) line in the listing: its comparison's title (or its
    caption) and whether it is partial; a folder that does not read as one the import wrote is
    named as such."""
    rel = printable(path.relative_to(shipped))
    try:
        provenance = strict_yaml(regular_bytes(path / "provenance.yaml", MAX_SMALL_BYTES))
        if not isinstance(provenance, dict):
            raise ValueError("its provenance.yaml is not a mapping")
        partial = f" ({printable(str(provenance['partial'])[:200])})" if provenance.get("partial") else ""
        if os.path.lexists(path / "comparison.md"):
            title = regular_bytes(path / "comparison.md", MAX_SMALL_BYTES).decode().partition("\n")[0]
            return f"- [`{rel}`]({rel}/comparison.md): {printable(title.lstrip('# ')[:200])}{partial}"
        return f"- [`{rel}`]({rel}/figure.png): {printable(str(provenance['caption'])[:300])}"
    except (OSError, ValueError, KeyError, RecursionError, yaml.YAMLError) as exc:
        return f"- `{rel}`: not read ({printable(str(exc)[:100])}); rebuilt by the next import of its runs"
