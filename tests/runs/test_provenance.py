"""A run's commit is `-dirty` when code differs from it, not when tracked results do."""

import subprocess

from shared.runs.provenance import git_state


def git(repo, *args):
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True
    )


def test_tracked_results_leave_the_commit_clean_and_code_makes_it_dirty(tmp_path):
    (tmp_path / "results" / "campaign").mkdir(parents=True)
    state, code = tmp_path / "results" / "campaign" / "state.tar.gz", tmp_path / "run.py"
    state.write_bytes(b"round 47")
    code.write_text("print(1)\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "start")
    assert git_state(tmp_path)["dirty"] is False

    state.write_bytes(b"round 100")  # a campaign session rewrote its state
    assert git_state(tmp_path)["dirty"] is False

    code.write_text("print(2)\n")
    assert git_state(tmp_path)["dirty"] is True
