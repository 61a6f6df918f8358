"""Reliability of a run's directory: every method resumes bit-identically after a kill, corrupt
state is set aside, a planted pickle is refused, one writer per run, no overwriting."""

import json
import os
import pickle

import pytest
import torch

from benchmarks.resume_matrix import NEEDS, killed_writing
from shared.config.schema import run_id
from shared.methods.registry import method_names
from shared.runs.directory import RunDirectory, RunDirectoryError
from shared.training import trainer
from tests.methods.test_fedavg import history


@pytest.mark.parametrize("method", method_names())
def test_every_method_resumes_bit_identically_after_a_kill(method, tiny_cfg, tmp_path, kill_in_round):
    cfg = tiny_cfg(
        f"method={method}",
        "federation.rounds=3",
        "federation.participation=0.5",
        "dataset.synthetic.image_size=16",
        *NEEDS.get(method, []),
    )
    trainer.run(cfg, tmp_path / "straight")
    kill_in_round(cfg, tmp_path / "resumed", 1)
    trainer.run(cfg, tmp_path / "resumed")
    assert history(tmp_path / "resumed") == history(tmp_path / "straight")
    a, b = (torch.load(tmp_path / d / "model.pt", weights_only=True) for d in ("straight", "resumed"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def interrupted(tiny_cfg, tmp_path, kill_in_round):
    cfg = tiny_cfg("federation.rounds=3")
    kill_in_round(cfg, tmp_path / "run", 1)
    return cfg


@pytest.mark.parametrize("damage", [b"", b"\x80\x02garbage", "truncate"])
def test_an_unreadable_checkpoint_is_set_aside_and_the_run_restarts(damage, tiny_cfg, tmp_path, kill_in_round, capsys):
    cfg = interrupted(tiny_cfg, tmp_path, kill_in_round)
    ckpt = tmp_path / "run" / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:100] if damage == "truncate" else damage)
    (tmp_path / "run" / ".checkpoint.pt.12345.tmp").write_bytes(b"left by a kill")
    assert trainer.run(cfg, tmp_path / "run")["status"] == "completed"
    assert "checkpoint.pt" in capsys.readouterr().err
    assert list((tmp_path / "run").glob("checkpoint.pt.corrupt-*"))
    assert not list((tmp_path / "run").glob(".*.tmp"))


def test_a_garbage_summary_is_set_aside_and_the_run_finishes(tiny_cfg, tmp_path):
    cfg = tiny_cfg()
    trainer.run(cfg, tmp_path / "run")
    (tmp_path / "run" / "metrics.json").write_text("{not json")
    assert trainer.run(cfg, tmp_path / "run")["status"] == "completed"
    assert list((tmp_path / "run").glob("metrics.json.corrupt-*"))


def test_a_planted_pickle_is_refused_not_executed(tiny_cfg, tmp_path, kill_in_round):
    cfg = interrupted(tiny_cfg, tmp_path, kill_in_round)
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with open(tmp_path / "run" / "checkpoint.pt", "wb") as f:
        pickle.dump({"identity": Payload()}, f)
    assert trainer.run(cfg, tmp_path / "run")["status"] == "completed"  # from scratch, the pickle set aside
    assert not marker.exists()
    assert list((tmp_path / "run").glob("checkpoint.pt.corrupt-*"))


def test_a_directory_of_another_run_is_refused_never_overwritten(tiny_cfg, tmp_path):
    first = trainer.run(tiny_cfg(), tmp_path / "run")
    with pytest.raises(RunDirectoryError, match="another config"):
        trainer.run(tiny_cfg("seed=1"), tmp_path / "run")
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == first


def test_a_second_writer_is_refused(tiny_cfg, tmp_path):
    from shared.runs.directory import RunDirectory

    holder = RunDirectory(tmp_path / "run", tiny_cfg())
    holder.lock()
    try:
        with pytest.raises(RunDirectoryError, match="another process"):
            trainer.run(tiny_cfg(), tmp_path / "run")
    finally:
        holder.unlock()
    assert trainer.run(tiny_cfg(), tmp_path / "run")["status"] == "completed"


# (file, which of its writes is killed halfway): each checkpoint, each metrics.jsonl, the final
# model and the summary; the run goes on from the last good state and ends as an uninterrupted one
WRITES = [("checkpoint.pt", 2), ("metrics.jsonl", 1), ("metrics.jsonl", 3), ("model.pt", 1), ("metrics.json", 1)]


@pytest.mark.parametrize("method", ["fedavg", "fedgen"])
@pytest.mark.parametrize("name, nth", WRITES)
def test_a_kill_in_the_middle_of_a_write_resumes_bit_identically(name, nth, method, tiny_cfg, tmp_path):
    cfg = tiny_cfg(f"method={method}", "federation.rounds=3", "dataset.synthetic.image_size=16")
    trainer.run(cfg, tmp_path / "straight")
    with killed_writing(name, nth), pytest.raises(KeyboardInterrupt):
        trainer.run(cfg, tmp_path / "resumed")
    assert list((tmp_path / "resumed").glob(f".{name}.*.tmp"))  # what the kill left
    trainer.run(cfg, tmp_path / "resumed")
    assert history(tmp_path / "resumed") == history(tmp_path / "straight")
    assert not list((tmp_path / "resumed").glob(".*.tmp")) and not (tmp_path / "resumed" / "checkpoint.pt").exists()
    a, b = (torch.load(tmp_path / d / "model.pt", weights_only=True) for d in ("straight", "resumed"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_kill_9_mid_run_then_the_same_command_resumes_bit_identically(tmp_path):
    """A real SIGKILL of `python -m shared.run` in its third round (of 5), wherever it lands."""
    import signal
    import subprocess
    import sys

    from tests.conftest import TINY

    command = [
        sys.executable,
        "-m",
        "shared.run",
        *TINY,
        "federation.rounds=5",
        "method=scaffold",
        f"data_root={tmp_path / 'data'}",
        "trainer.progress=true",
    ]
    subprocess.run([*command, "--out", str(tmp_path / "straight")], check=True, capture_output=True)
    proc = subprocess.Popen([*command, "--out", str(tmp_path / "resumed")], stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "round 2/5" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "resumed" / "metrics.json").exists()
    again = subprocess.run([*command, "--out", str(tmp_path / "resumed")], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "round 1/5" not in again.stderr and "round 5/5" in again.stderr  # resumed, not restarted
    assert history(tmp_path / "resumed") == history(tmp_path / "straight")


# --- states a crash, a full disk or a tampered file can leave: each set aside and redone ---------


def checkpoint_with(cfg, tmp_path, kill_in_round, change):
    """A run killed after round 1 whose checkpoint `change` then damaged."""
    kill_in_round(cfg, tmp_path / "run", 1)
    path = tmp_path / "run" / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)


def first_tensor(state):
    name = next(iter(state["global"]))
    state["global"][name] = torch.zeros(3, 1, 7)


@pytest.mark.parametrize(
    "change",
    [
        first_tensor,
        lambda state: state["global"].clear(),
        lambda state: state.update(history=[{"round": 5, "train_loss": 1.0}]),
        lambda state: state.update(history="not a list"),
        lambda state: state.update(elapsed="soon"),
        lambda state: state.pop("method"),
    ],
    ids=[
        "wrongly shaped tensor",
        "no model tensors",
        "history of another round",
        "history not a list",
        "elapsed of the wrong type",
        "no method state",
    ],
)
def test_a_checkpoint_that_does_not_fit_is_set_aside_and_the_run_redone(
    change, tiny_cfg, tmp_path, kill_in_round, capsys
):
    cfg = tiny_cfg("federation.rounds=3")
    trainer.run(cfg, tmp_path / "straight")
    checkpoint_with(cfg, tmp_path, kill_in_round, change)
    capsys.readouterr()
    assert trainer.run(cfg, tmp_path / "run")["status"] == "completed"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint.pt" in err and "moved to checkpoint.pt.corrupt-" in err, err
    assert len(list((tmp_path / "run").glob("checkpoint.pt.corrupt-*"))) == 1
    assert history(tmp_path / "run") == history(tmp_path / "straight")  # started again, the same run


@pytest.mark.parametrize(
    "summary",
    [
        {"status": 3},
        {"status": "completed", "run_id": None},
        {"status": "completed", "final_acc": "high"},
        {"status": "completed", "global_acc": 7},
        [1, 2],
        "completed",
    ],
    ids=["status a number", "run id null", "accuracy a string", "curve a number", "a list", "a string"],
)
def test_a_summary_with_fields_of_the_wrong_type_is_set_aside_and_the_run_redone(summary, tiny_cfg, tmp_path, capsys):
    cfg = tiny_cfg()
    first = trainer.run(cfg, tmp_path / "run")
    if isinstance(summary, dict):
        summary = {**first, **summary}
    (tmp_path / "run" / "metrics.json").write_text(json.dumps(summary))
    capsys.readouterr()
    again = trainer.run(cfg, tmp_path / "run")
    assert again["status"] == "completed" and again["global_acc"] == first["global_acc"]
    assert "is not a run's summary" in capsys.readouterr().err
    assert len(list((tmp_path / "run").glob("metrics.json.corrupt-*"))) == 1


def test_a_config_yaml_that_is_not_utf8_is_set_aside_and_the_run_goes_on(tiny_cfg, tmp_path, kill_in_round, capsys):
    cfg = interrupted(tiny_cfg, tmp_path, kill_in_round)
    (tmp_path / "run" / "config.yaml").write_bytes(b"run_id: \xff\xfe\n")
    assert trainer.run(cfg, tmp_path / "run")["status"] == "completed"
    assert "config.yaml is not what a run writes" in capsys.readouterr().err
    assert list((tmp_path / "run").glob("config.yaml.corrupt-*"))
    assert f"run_id: {run_id(cfg)}" in (tmp_path / "run" / "config.yaml").read_text()


def test_another_runs_summary_in_a_runs_directory_is_set_aside(tiny_cfg, tmp_path, capsys):
    cfg = tiny_cfg()
    first = trainer.run(cfg, tmp_path / "run")
    (tmp_path / "run" / "metrics.json").write_text(json.dumps({**first, "run_id": "0123456789abcdef"}))
    assert trainer.run(cfg, tmp_path / "run")["run_id"] == first["run_id"]
    assert "belongs to run '0123456789abcdef'" in capsys.readouterr().err


def test_a_recorded_failure_is_moved_aside_not_deleted_when_tried_again(tiny_cfg, tmp_path, capsys):
    cfg = tiny_cfg()
    out = tmp_path / "run"
    out.mkdir()
    RunDirectory(out, cfg).record_failure(RuntimeError("a bug"))
    recorded = (out / "metrics.json").read_text()
    assert trainer.run(cfg, out)["status"] == "completed"
    (aside,) = out.glob("metrics.json.failed-*")
    assert aside.read_text() == recorded and "records a failure" in capsys.readouterr().err


def tiny_args(tmp_path):
    from tests.conftest import TINY

    return [*TINY, f"data_root={tmp_path / 'data'}"]


@pytest.mark.parametrize("status", ["suspect: final accuracy 10.00% is chance (10.00%)", "failed: RuntimeError: a bug"])
def test_another_configs_out_leaves_a_finished_or_failed_run_as_it_is(status, tiny_cfg, tmp_path, capsys):
    """The directory's identity is known before anything in it changes: a suspect run (a
    result, with no kept copy) or a recorded failure stay byte for byte."""
    from shared.run import main

    out = tmp_path / "run"
    summary = trainer.run(tiny_cfg(), out)
    (out / "metrics.json").write_text(json.dumps({**summary, "status": status}))
    (out / "failure.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main([*tiny_args(tmp_path), "seed=1", "--out", str(out), "--record-failure"]) == 2
    assert "another config than this one" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_suspect_run_is_a_result_and_is_not_trained_again(tiny_cfg, tmp_path):
    out = tmp_path / "run"
    summary = trainer.run(tiny_cfg(), out)
    (out / "metrics.json").write_text(json.dumps({**summary, "status": "suspect: planted"}))
    assert trainer.run(tiny_cfg(), out)["status"] == "suspect: planted"


def test_an_out_of_user_files_is_refused_and_nothing_in_it_touched(tiny_cfg, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    (home / ".draft.123.tmp").write_text("also mine")
    with pytest.raises(RunDirectoryError, match="is not a run directory"):
        trainer.run(tiny_cfg(), home)
    assert sorted(p.name for p in home.iterdir()) == [".draft.123.tmp", "notes.txt"]


def test_a_full_disk_is_one_line_and_the_run_resumes_once_space_is_freed(tmp_path):
    """RLIMIT_FSIZE stands in for a full disk: the checkpoint's write fails (EFBIG, as ENOSPC
    would); the job says so in one line, records no failure, and the same command finishes."""
    import resource
    import subprocess
    import sys

    command = [
        sys.executable,
        "-m",
        "shared.run",
        *tiny_args(tmp_path),
        "--out",
        str(tmp_path / "run"),
        "--record-failure",
    ]

    def limit():
        return resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    full = subprocess.run(command, capture_output=True, text=True, preexec_fn=limit)
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    (line,) = [err for err in full.stderr.splitlines() if err.startswith("error: ")]
    assert "no space left" in line and "run the same command again" in line
    assert not (tmp_path / "run" / "metrics.json").exists() and not list((tmp_path / "run").glob(".*.tmp"))
    freed = subprocess.run(command, capture_output=True, text=True)
    assert freed.returncode == 0, freed.stderr
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "completed"


def test_a_run_reads_its_own_files_within_the_bounds_of_every_reader(tiny_cfg, tmp_path, kill_in_round, capsys):
    """config.yaml and metrics.json go through the one reader of run files (shared/runs/files.py):
    a config larger than a run writes is set aside unparsed, a summary nested past what a run
    writes is set aside (json alone raises RecursionError), and the run goes on."""
    cfg = interrupted(tiny_cfg, tmp_path, kill_in_round)
    run_dir = tmp_path / "run"
    (run_dir / "config.yaml").write_text(f"run_id: {run_id(cfg)}\n" + "# padding\n" * 10_000)
    (run_dir / "metrics.json").write_text("[" * 100_000 + "]" * 100_000)
    assert trainer.run(cfg, run_dir)["status"] == "completed"
    err = capsys.readouterr().err
    assert "config.yaml is not a regular file of at most" in err
    assert "metrics.json is not what a run writes" in err
    assert len(list(run_dir.glob("config.yaml.corrupt-*"))) == len(list(run_dir.glob("metrics.json.corrupt-*"))) == 1
