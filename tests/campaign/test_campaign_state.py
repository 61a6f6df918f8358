"""The campaign's state file: crash-safe saves in every form, and the budget of what a session returns.

A kill is stood in for by making every step that changes what the state's folder shows (a
rename, a removal) raise from the k-th on, for every k: what a kill there leaves behind. The
budget is rehearsed with incompressible stand-ins for checkpoints and with a real smoke run.
"""

import os
import time
import types
from pathlib import Path

import numpy as np
import pytest

from shared.campaign import state as campaign_state
from shared.campaign import train as campaign_train
from shared.campaign import unit_sizing
from shared.campaign.state import LeftOut, read_state, write_state
from shared.runs.files import rounds_done
from shared.targets.copies import campaign_runs
from shared.targets.scales import SMOKE_ROUNDS
from tests.campaign.test_campaign import TARGET, checkout, clock_of_rounds, summary, train

ABOUT = {"targets": [TARGET], "scale": "smoke", "copy": None}
WHOLE, PARTS, FEWER_PARTS = 15, 0.001, 0.003  # part_mib: 1 file, 16 parts, 6 (of 16.5 kB)


class Killed(BaseException):
    """The process ends here: nothing after it runs, no cleanup either."""


def state_files(rid: str, content: bytes, rounds: int = 1) -> list[tuple[str, bytes, float]]:
    return [
        (f"progress/{rid}/config.yaml", f"run_id: {rid}\n".encode(), 0.0),
        (f"progress/{rid}/metrics.jsonl", b'{"round": 1}\n' * rounds, 0.0),
        (f"progress/{rid}/checkpoint.pt", content, 0.0),
    ]


def killed_at(monkeypatch, k: int) -> None:
    """os.replace, Path.unlink and Path.rename raise Killed from their k-th call on."""
    calls = []

    def step(real):
        def killable(*args, **kwargs):
            calls.append(None)
            if len(calls) >= k:
                raise Killed
            return real(*args, **kwargs)

        return killable

    monkeypatch.setattr(os, "replace", step(os.replace))
    monkeypatch.setattr(Path, "unlink", step(Path.unlink))
    monkeypatch.setattr(Path, "rename", step(Path.rename))


@pytest.mark.parametrize(
    "old_mib, new_mib",
    [(WHOLE, WHOLE), (WHOLE, PARTS), (PARTS, WHOLE), (PARTS, PARTS), (PARTS, FEWER_PARTS), (FEWER_PARTS, PARTS)],
)
def test_a_save_killed_at_any_step_leaves_the_old_state_or_the_new(tmp_path, monkeypatch, capsys, old_mib, new_mib):
    rng, rid = np.random.default_rng(0), "0123456789abcdef"
    old, new = state_files(rid, b"old" + rng.bytes(16000)), state_files(rid, b"new" + rng.bytes(16000), rounds=2)
    states = {"old": {name: data for name, data, _ in old}, "new": {name: data for name, data, _ in new}}
    read = []
    for k in range(1, 1000):
        state = tmp_path / str(k) / "state.tar.gz"
        write_state(state, old, ABOUT, old_mib)
        assert len(campaign_state.part_paths(state)) == {WHOLE: 0, PARTS: 16, FEWER_PARTS: 6}[old_mib]
        with monkeypatch.context() as patch:
            killed_at(patch, k)
            try:
                write_state(state, new, ABOUT, new_mib)
                killed = False
            except Killed:
                killed = True
        members = read_state(state, owner=True)[1]  # its owner (train) reads it: one form is left
        read.append(next(name for name, held in states.items() if held == members))
        assert not (state.is_file() and campaign_state.part_paths(state))  # one form left
        assert read_state(state)[1] == members  # and it reads again, with no note
        write_state(state, old, ABOUT, new_mib)  # the next save after it
        assert read_state(state)[1] == states["old"]
        if not killed:
            break
    assert read[-1] == "new" and read.count("old") >= 1 and len(read) >= 2, read
    assert read == sorted(read, key=["old", "new"].index), read  # once the new state reads, it stays
    capsys.readouterr()


def test_a_whole_file_beside_parts_of_the_same_state_reads_the_parts_and_removes_the_file(tmp_path, capsys):
    """The last step of a save into parts cut short: both hold one state, the session returns the parts."""
    state = tmp_path / "state.tar.gz"
    write_state(state, state_files("0123456789abcdef", np.random.default_rng(0).bytes(5000)), ABOUT, PARTS)
    (tmp_path / "state.tar.gz").write_bytes(b"".join(p.read_bytes() for p in campaign_state.part_paths(state)))
    members = read_state(state, owner=True)[1]
    assert not state.exists() and campaign_state.part_paths(state) and read_state(state)[1] == members
    assert capsys.readouterr().err == ""


def test_parts_of_two_states_mixed_are_refused_in_one_line(tmp_path):
    """What the earlier save into parts left when killed (each part replaced in turn): whichever
    part is mixed in, a CampaignError (one line), never a zlib error's traceback."""
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        write_state(tmp_path / name / "state.tar.gz", state_files("0123456789abcdef", rng.bytes(16000)), ABOUT, PARTS)
    parts = campaign_state.part_paths(tmp_path / "a" / "state.tar.gz")
    for i, part in enumerate(parts):
        kept = part.read_bytes()
        part.write_bytes(campaign_state.part_paths(tmp_path / "b" / "state.tar.gz")[i].read_bytes())
        with pytest.raises(campaign_state.CampaignError):
            read_state(tmp_path / "a" / "state.tar.gz")
        part.write_bytes(kept)


def smoke_run_ids() -> list[str]:
    return list(campaign_runs([TARGET], "smoke", None)[0])


def test_the_budget_keeps_the_finished_runs_and_the_most_advanced_checkpoints(tmp_path, capsys):
    finished_ids, progress_ids = smoke_run_ids()[:3], ["a" * 16, "b" * 16, "c" * 16]
    rng = np.random.default_rng(0)
    files = [(f"finished/{rid}/metrics.json", summary(rid, "completed"), 0.0) for rid in finished_ids]
    for rid, rounds in zip(progress_ids, (3, 1, 2)):
        files += state_files(rid, rng.bytes(200_000), rounds)  # incompressible, as weights nearly are
    state, part_mib, max_parts = tmp_path / "state.tar.gz", 0.09, 6  # 566 kB: two checkpoints, not three
    written = write_state(state, files, ABOUT, part_mib, max_parts)
    members = read_state(state)[1]
    assert {f"finished/{rid}/metrics.json" for rid in finished_ids} <= set(members)
    assert {name.split("/")[1] for name in members if name.startswith("progress/")} == {"a" * 16, "c" * 16}
    assert written.left_out == (LeftOut("b" * 16, sum(len(d) for n, d, _ in files if "/bbbb" in n), 1),)
    assert written.files == len(campaign_state.part_paths(state)) <= max_parts
    assert written.size <= max_parts * campaign_state.part_bytes(part_mib)
    assert campaign_state.carried_finished_size(state, members) <= written.finished_size < written.size

    args = types.SimpleNamespace(state=state, root=tmp_path, max_parts=max_parts, part_mib=part_mib)
    campaign_train.tell_left_out(args, written)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"note: run {'b' * 16}'s checkpoint (0.2 MiB, 1 rounds) is left out")
    assert "could not return it" in err[0] and "starts again from round 0" in err[0]

    # without a budget (any other writer), or when the finished runs alone pass it: everything
    assert write_state(tmp_path / "all.tar.gz", files, ABOUT, part_mib).left_out == ()
    finished_big = [(f"finished/{rid}/metrics.jsonl", rng.bytes(300_000), 0.0) for rid in finished_ids] + files
    written = write_state(tmp_path / "big.tar.gz", finished_big, ABOUT, part_mib, max_parts)
    assert written.left_out == () and written.files > max_parts
    members = read_state(tmp_path / "big.tar.gz")[1]
    assert len(members) == len(finished_big)
    assert 0 < campaign_state.carried_finished_size(tmp_path / "big.tar.gz", members) <= written.finished_size
    campaign_train.tell_left_out(types.SimpleNamespace(**{**vars(args), "state": tmp_path / "big.tar.gz"}), written)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and "cannot return the whole state" in err[0]


def test_a_checkpoint_the_session_could_not_return_stays_out_of_the_state_and_here(tmp_path, monkeypatch, capsys):
    """A real smoke session stopped after the first run's second round (the round-time estimate
    said the run would finish, so it started), with a budget too small for its checkpoint:
    named in one line, left out of the state, kept on this machine; the next session on it, as
    short, finishes the run from there (from scratch it would stop after round 2 again)."""
    root, state = checkout(tmp_path / "project"), tmp_path / "carry" / "state.tar.gz"
    first = smoke_run_ids()[0]

    def session() -> str:
        with monkeypatch.context() as patch:
            clock_of_rounds(patch)  # a budget that ends half a tick after round 1's
            patch.setattr(unit_sizing, "round_seconds", lambda cfgs, measured: unit_sizing.Estimate(1.0, "test"))
            assert train(root, state, (1.5 * 100 + 30) / 60, "--part-mib", "0.05", "--max-parts", "1") == 0
        return capsys.readouterr().err

    err = session()
    assert rounds_done(root / "results" / "runs" / first) == 2, err
    assert read_state(state)[1] == {}, err
    notes = [line for line in err.splitlines() if "left out" in line]
    assert len(notes) == 1 and notes[0].startswith(f"note: run {first}'s checkpoint (") and ", 2 rounds)" in notes[0]
    session()
    assert f"finished/{first}/metrics.json" in read_state(state)[1]


def test_a_unit_that_cannot_finish_and_whose_checkpoint_cannot_come_back_is_not_started(tmp_path, monkeypatch, capsys):
    runs = campaign_runs([TARGET], "smoke", None)[0]
    args = types.SimpleNamespace(
        device="cpu", data_root=None, clients_per_step=1, root=tmp_path, max_parts=1, part_mib=0.001
    )
    monkeypatch.setattr(unit_sizing, "round_seconds", lambda cfgs, measured: unit_sizing.Estimate(100.0, "test"))
    deadline, runs_dir, first = time.time() + 150, tmp_path / "results" / "runs", next(iter(runs))
    counts = campaign_train.train_runs(runs, args, deadline, runs_dir)  # a round fits, not SMOKE_ROUNDS of them
    assert counts == {"not started (could not finish, and its checkpoint cannot come back)": len(runs)}
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(runs) and err[0].startswith(f"run(s) {first} not started: {SMOKE_ROUNDS} rounds")
    assert "could not come back: a session returns 1 files of 0.001 MiB" in err[0]
    assert not runs_dir.exists()
    # started where it can finish in time, or where its checkpoint could come back
    assert campaign_train.not_worth_starting([first], runs, args, time.time() + 1000, 100.0, runs_dir, 0) is None
    roomy = types.SimpleNamespace(**{**vars(args), "max_parts": 8, "part_mib": 15})
    assert campaign_train.not_worth_starting([first], runs, roomy, deadline, 100.0, runs_dir, 0) is None
    weights = campaign_train.checkpoint_size(runs[first], runs_dir / first)
    assert weights > 10_000  # the smoke model's weights: a real lower bound, not a guess of 0
    assert (
        campaign_train.not_worth_starting(
            [first], runs, roomy, deadline, 100.0, runs_dir, 8 * campaign_state.part_bytes(15) - weights
        )
        is not None
    )


def test_a_run_with_per_client_state_continues_on_another_machine_from_its_round(tmp_path, monkeypatch):
    """MOON keeps each client's previous local model in files its checkpoint names
    (shared/runs/tensor_files.py): the state carries them, so a run stopped between rounds
    continues from its round on a fresh machine, its checkpoint not set aside, and ends as an
    uninterrupted run does."""
    from shared.campaign.state import restore, state_members
    from shared.targets.table_declarations import expand, get_table
    from shared.training import timed_rounds, trainer

    cell = next(
        c
        for c in expand(get_table("fedssd", "table2"), "smoke", {"trainer": {"device": "cpu", "progress": False}})
        if c.row.label == "MOON" and c.seed == 0
    )
    cfg, rid, first, second = cell.config, cell.run_id, tmp_path / "first", tmp_path / "second"
    with monkeypatch.context() as patch:  # the clock moves 100 s a round: the run stops before its last
        clock_of_rounds(patch)
        with pytest.raises(timed_rounds.OutOfTime):
            timed_rounds.run_timed(cfg, first / rid, timed_rounds.time.time() + 250)
    state = tmp_path / "state.tar.gz"
    write_state(state, state_members([rid], first), ABOUT)
    members = read_state(state)[1]
    assert 0 < members[f"progress/{rid}/metrics.jsonl"].count(b"\n") < SMOKE_ROUNDS
    carried = sorted(name for name in members if "/client_state/" in name)
    assert len(carried) == cfg.partition.clients, carried  # every client trained: its previous model

    stale = second / rid / "client_state" / "previous-0-r0.pt"  # an older checkpoint's, there before
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"older")
    written = []
    real_install = campaign_state.install
    monkeypatch.setattr(
        campaign_state, "install", lambda path, content: (written.append(path.name), real_install(path, content))
    )
    assert restore(members, second, tmp_path / "shipped")["progress"] == [rid]
    # as a round's save writes them: a kill in between never counts rounds its checkpoint lacks
    assert written[-2:] == ["checkpoint.pt", "metrics.jsonl"] and sum(
        n.startswith("previous-") for n in written
    ) == len(carried)
    assert not stale.exists()
    resumed = trainer.run(cfg, second / rid)
    assert not [p.name for p in (second / rid).iterdir() if p.name.startswith("checkpoint.pt.")]  # none set aside
    assert resumed["global_acc"] == trainer.run(cfg, tmp_path / "straight")["global_acc"]


def test_a_finished_run_put_over_its_progress_leaves_neither_checkpoint_nor_client_state(tmp_path):
    """A run finished elsewhere replaces its checkpoint here, and the per-client files only that
    checkpoint needed (for a ResNet-50 MOON run, gigabytes) go with it."""
    from shared.runs.shipped import put_finished
    from tests.campaign.test_campaign import finish_for_table

    finish_for_table(tmp_path / "elsewhere", "0123456789abcdef", 60.0)
    run_dir = tmp_path / "here" / "0123456789abcdef"
    (run_dir / "client_state").mkdir(parents=True)
    (run_dir / "client_state" / "u-3-r4.pt").write_bytes(b"Fisher")
    (run_dir / "checkpoint.pt").write_bytes(b"round 4")
    assert put_finished(
        run_dir, {"metrics.json": (tmp_path / "elsewhere" / "0123456789abcdef" / "metrics.json").read_bytes()}
    )
    assert sorted(p.name for p in run_dir.iterdir()) == ["metrics.json"]
