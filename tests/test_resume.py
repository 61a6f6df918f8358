"""Reliability of a run's directory: every method resumes bit-identically after a kill, corrupt
state is set aside, a planted pickle is refused, one writer per run, no overwriting."""
import json
import os
import pickle

import pytest
import torch

from benchmarks.resume_matrix import NEEDS, killed_writing
from shared import trainer
from shared.methods import method_names
from shared.run_directory import RunDirectoryError
from tests.test_fedavg import history



@pytest.mark.parametrize("method", method_names())
def test_every_method_resumes_bit_identically_after_a_kill(method, tiny_cfg, tmp_path, kill_in_round):
    cfg = tiny_cfg(f"method={method}", "federation.rounds=3", "federation.participation=0.5",
                   "dataset.synthetic.image_size=16", *NEEDS.get(method, []))
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
    from shared.run_directory import RunDirectory

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
WRITES = [("checkpoint.pt", 2), ("metrics.jsonl", 1), ("model.pt", 1), ("metrics.json", 1)]


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

    command = [sys.executable, "-m", "shared.run", *TINY, "federation.rounds=5", "method=scaffold",
               f"data_root={tmp_path / 'data'}", "trainer.progress=true"]
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
