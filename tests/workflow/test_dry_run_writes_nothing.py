"""Reading the workflow writes nothing (issue 42): `snakemake -n` in a fresh checkout, for a
table, a smoke table, a figure and a whole paper, leaves git status as it was and creates no
file but Snakemake's own state in .snakemake/, which it makes on every start, a dry run
included (its metadata, locks and cache folders), so that one is unavoidable."""

import os
import subprocess
from pathlib import Path

from tests.workflow.test_workflow import ROOT, job_counts, snakemake

# Python as a user's shell runs it: writing byte code, which the Snakefile turns off for its own process
PYTHON_AS_USERS_RUN_IT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
DRY_RUNS = [
    ["papers/fedssd/table2"],
    ["--config", "scale=smoke", "device=cpu", "--", "papers/fedssd/table2"],
    ["--config", "scale=smoke", "device=cpu", "--", "papers/fedcad/fig4"],
    ["--config", "scale=smoke", "device=cpu", "--", "fedssd"],
]


def git(checkout: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=checkout, capture_output=True, text=True, check=True)
    return proc.stdout


def fresh_checkout(path: Path) -> Path:
    """The project's tracked files (and the new ones git does not ignore), committed in a repository of their own."""
    files = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes((ROOT / name).read_bytes())
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "-c", "user.name=test", "-c", "user.email=test@example.org", "commit", "-q", "-m", "fresh")
    return path


def files_and_times(checkout: Path) -> dict[str, int]:
    """Every path of the checkout but Snakemake's state and git's, with its modification time."""
    return {
        str(p.relative_to(checkout)): p.stat().st_mtime_ns
        for p in checkout.rglob("*")
        if p.relative_to(checkout).parts[0] not in (".snakemake", ".git")
    }


def test_a_dry_run_writes_nothing_in_a_fresh_checkout(tmp_path):
    checkout = fresh_checkout(tmp_path / "checkout")
    assert git(checkout, "status", "--porcelain", "--ignored") == ""
    before = files_and_times(checkout)
    for args in DRY_RUNS:
        dry = snakemake(checkout, "-n", *args, env=PYTHON_AS_USERS_RUN_IT)
        assert dry.returncode == 0 and job_counts(dry.stdout).get("run"), (args, dry.stderr[-3000:])
    assert git(checkout, "status", "--porcelain", "--ignored") == "!! .snakemake/\n"
    after = files_and_times(checkout)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))


def test_a_dry_run_on_a_copy_of_the_data_writes_nothing_in_the_data_root(tmp_path):
    """A copy named by its SHA-256 is found by hashing the files under <data root>/copies/; the
    digests it remembers are written by the runs that load the copy, not by reading the workflow."""
    from shared.data.catalog import file_digest
    from shared.data.datasets import CIFAR
    from tests.campaign.test_campaign import write_copy

    checkout, data = fresh_checkout(tmp_path / "checkout"), tmp_path / "data"
    (data / "copies").mkdir(parents=True)
    copy = write_copy(data / "copies" / "cifar10-jpeg.zip", CIFAR["cifar10"]["classes"])
    before = files_and_times(data)
    config = ["scale=paper", "device=cpu", f"data_root={data}", f"copy=cifar10={file_digest(copy, 'sha256')}"]
    dry = snakemake(checkout, "-n", "--config", *config, "--", "papers/fedssd/table2", env=PYTHON_AS_USERS_RUN_IT)
    assert dry.returncode == 0 and job_counts(dry.stdout).get("run"), dry.stderr[-3000:]
    assert files_and_times(data) == before and git(checkout, "status", "--porcelain", "--ignored") == "!! .snakemake/\n"
