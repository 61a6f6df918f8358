"""python -m shared.curves: per-round accuracy and loss of runs, finished or still training,
from hand-written metrics.jsonl / metrics.json / config.yaml."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shared.curves import PANELS, load_run, main, plot
from shared.runs.files import RunFilesError, read_history

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def record(r, acc):
    return {
        "round": r,
        "clients": [0, 1],
        "train_loss": 2.0 / r,
        "global_acc": acc,
        "global_loss": 2.5 - acc / 50,
        "per_class_acc": [acc] * 10,
        "local_acc": acc - 4,
        "local_accs": [acc - 5, acc - 3],
        "seconds": 1.0,
    }


def make_run(root, name, method, seed, accs, finished=True, jsonl=True, cut_last_line=False):
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "method": {"name": method, "mu": 0.01}}))
    records = [record(r + 1, a) for r, a in enumerate(accs)]
    if jsonl:
        text = "".join(json.dumps(x) + "\n" for x in records)
        if cut_last_line:
            text += json.dumps(record(len(accs) + 1, 99.0))[:25]  # a copy taken while the line was written
        (run / "metrics.jsonl").write_text(text)
    if finished:
        (run / "metrics.json").write_text(
            json.dumps(
                {
                    "status": "completed",
                    "eval_rounds": [x["round"] for x in records],
                    "final_acc": accs[-1],
                    "global_acc": accs,
                    "local_acc": [x["local_acc"] for x in records],
                    "global_loss": [x["global_loss"] for x in records],
                }
            )
        )
    return run


def test_reads_running_and_finished_runs_with_method_and_seed(tmp_path):
    finished = make_run(tmp_path, "a1", "fedssd", 1, [20.0, 35.0, 41.0])
    running = make_run(tmp_path, "b2", "fedavg", 0, [18.0, 30.0], finished=False, cut_last_line=True)
    summary_only = make_run(tmp_path, "c3", "moon", 2, [10.0, 12.0, 15.0, 17.0], jsonl=False)

    run = load_run(finished)
    assert run.label == "fedssd, seed 1" and run.status == "completed" and run.rounds == 3
    assert run.series["global_acc"] == ([1, 2, 3], [20.0, 35.0, 41.0])
    assert run.series["local_acc"][1] == [16.0, 31.0, 37.0]
    assert run.series["train_loss"][1] == pytest.approx([2.0, 1.0, 2.0 / 3])
    assert set(run.series) == {key for key, _, _ in PANELS}

    run = load_run(running)  # no metrics.json yet; the half-written last line is skipped
    assert run.label == "fedavg, seed 0" and run.status == "running" and run.rounds == 2

    run = load_run(summary_only)  # no metrics.jsonl: metrics.json's curves (no training loss there)
    assert run.label == "moon, seed 2" and run.rounds == 4 and "train_loss" not in run.series


def test_a_damaged_line_before_the_last_skips_the_run_in_one_line(tmp_path, capsys):
    good = make_run(tmp_path, "a1", "fedavg", 0, [20.0, 35.0])
    damaged = make_run(tmp_path, "b2", "fedprox", 0, [18.0, 30.0, 33.0])
    lines = (damaged / "metrics.jsonl").read_text().splitlines()
    (damaged / "metrics.jsonl").write_text("\n".join([lines[0], lines[1][:20], lines[2]]) + "\n")
    with pytest.raises(RunFilesError, match="line 2 is not JSON"):
        read_history(damaged)
    assert main([str(good), str(damaged), "-o", str(tmp_path / "c.png")]) == 0
    err = capsys.readouterr().err
    assert err.count("skipped:") == 1 and "metrics.jsonl: line 2 is not JSON" in err


def test_draws_one_line_per_run_in_each_panel(tmp_path):
    runs = [
        load_run(make_run(tmp_path, f"r{i}", "fedavg" if i < 2 else "fedprox", i, [10.0 + i, 20.0 + i, 30.0]))
        for i in range(3)
    ]
    runs.append(load_run(make_run(tmp_path, "same", "fedavg", 0, [11.0, 19.0], finished=False)))
    out = plot(runs, tmp_path / "out" / "curves.png")
    assert out.read_bytes()[:8] == PNG
    labels = [r.label for r in runs]
    assert len(set(labels)) == 4  # two "fedavg, seed 0" runs get their directory names added
    assert "fedavg, seed 0 (same)" in labels


def test_command_line(tmp_path, capsys):
    a = make_run(tmp_path, "a", "fedcsd", 0, [20.0, 30.0, 40.0])
    b = make_run(tmp_path, "b", "fedavg", 1, [15.0, 25.0], finished=False)
    out = tmp_path / "curves.png"
    assert main([str(a), str(b), str(tmp_path / "missing"), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert (
        "fedcsd, seed 0: 3 rounds (completed)" in captured.out and "fedavg, seed 1: 2 rounds (running)" in captured.out
    )
    assert "skipped" in captured.err and out.read_bytes()[:8] == PNG
    assert main([str(tmp_path / "missing")]) == 1


def test_imports_neither_torch_nor_the_trainer(tmp_path):
    """It runs beside training (a login node, a second terminal): no torch, no trainer."""
    run = make_run(tmp_path, "a", "fedavg", 0, [20.0, 30.0])
    code = (
        "import sys; from shared.curves import main; "
        f"assert main([{str(run)!r}, '-o', {str(tmp_path / 'c.png')!r}]) == 0; "
        "bad = [m for m in ('torch', 'shared.training.trainer', 'shared.methods.registry') if m in sys.modules]; "
        "assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "shared.curves", str(run), "-o", str(tmp_path / "d.png")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "d.png").read_bytes()[:8] == PNG


def test_partition(tmp_path, capsys):
    """--partition draws each run's partition.csv, the panel of the tables' partition figures,
    and skips a directory without one."""
    run = tmp_path / "a"
    run.mkdir()
    (run / "partition.csv").write_text("client,airplane,cat,dog\n0,5,1,0\n1,0,6,2\n")
    out = tmp_path / "p.png"
    assert main(["--partition", str(run), str(tmp_path / "missing"), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"wrote {out}" in captured.out and "holds no partition.csv" in captured.err
    assert out.read_bytes()[:8] == PNG
    assert main(["--partition", str(tmp_path / "missing")]) == 1
