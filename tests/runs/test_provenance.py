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


def test_a_copy_without_git_records_the_commit_its_bundle_was_made_at(tmp_path, monkeypatch):
    """A GPU session's checkout is a copy without .git: its bundle's source-commit.txt, passed to
    the steps as FEDREPRO_SOURCE_COMMIT, names the commit; anything but 40 hex digits names none."""
    from shared.campaign.session_checks import SOURCE_FILE, carried_source
    from shared.runs.provenance import SOURCE_ENV

    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.delenv(SOURCE_ENV, raising=False)
    assert git_state(tmp_path) == {"commit": None, "dirty": None} and carried_source(tmp_path) == {}
    (tmp_path / SOURCE_FILE).write_text(f"{sha}-dirty\n")
    monkeypatch.setenv(SOURCE_ENV, carried_source(tmp_path)[SOURCE_ENV])
    assert git_state(tmp_path) == {"commit": sha, "dirty": True}
    monkeypatch.setenv(SOURCE_ENV, sha)
    assert git_state(tmp_path) == {"commit": sha, "dirty": False}
    for forged in ("unknown", sha.upper(), sha + "0", "$(reboot)", ""):
        monkeypatch.setenv(SOURCE_ENV, forged)
        assert git_state(tmp_path) == {"commit": None, "dirty": None}, forged
    git(tmp_path, "init", "-q")
    (tmp_path / "run.py").write_text("print(1)\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "start")
    monkeypatch.setenv(SOURCE_ENV, sha)
    assert git_state(tmp_path)["commit"] != sha  # git's own answer first
