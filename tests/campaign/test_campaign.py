"""python -m shared.campaign: the whole offline cycle rehearsed on the CPU.

FedCAD Table 4 at smoke scale (8 runs of a few rounds, seconds each): `train` stopped by its
budget in the middle of a run; `train` again from the state file in a second checkout (the
next GPU session); `import` into the first; the table built from shipped runs, partial and then
whole; the workflow scheduling no run; the resumed run equal to an uninterrupted one.
"""

import gzip
import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
import types
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from shared.campaign import state as campaign_state
from shared.campaign import train as campaign_train
from shared.campaign import unit_sizing
from shared.campaign.cli import main
from shared.campaign.session_checks import check_carry
from shared.campaign.ship import build_shipped_figure, build_shipped_table, write_listing
from shared.campaign.state import read_state, write_state
from shared.config.dotted import deep_merge
from shared.config.schema import ConfigError, run_id
from shared.data.catalog import DataError, file_digest
from shared.data.datasets import CIFAR, load_dataset
from shared.targets.configs import load_config
from shared.targets.copies import Copy, campaign_runs
from shared.targets.figure_declarations import get_figure
from shared.targets.scales import SMOKE_ROUNDS
from shared.targets.table_declarations import expand, get_table
from shared.training import timed_rounds, trainer
from tests.campaign.carried_states import finished_files, write_genuine_state
from tests.workflow.test_workflow import job_counts, snakemake

ROOT = Path(__file__).resolve().parents[2]
TARGET = "papers/fedcad/table4"
PARTS = ("Snakefile", "shared", "papers", "workflow", "config", "profiles")


def checkout(directory: Path) -> Path:
    """A fresh copy of the project's code (no results), as a GPU session receives it."""
    directory.mkdir()
    for part in PARTS:
        if (ROOT / part).is_dir():
            shutil.copytree(
                ROOT / part,
                directory / part,
                ignore=lambda d, names: [
                    n
                    for n in names
                    if n == "__pycache__" or (Path(d, n).is_dir() and n.startswith(("table", "fig", "search")))
                ],
            )
        else:
            shutil.copy(ROOT / part, directory / part)
    return directory


def train(root: Path, state: Path, minutes: float, *extra: str) -> int:
    return main(
        [
            "train",
            TARGET,
            "--scale",
            "smoke",
            "--device",
            "cpu",
            "--minutes",
            str(minutes),
            "--state",
            str(state),
            "--root",
            str(root),
            "--data-root",
            str(root / "data"),
            *extra,
        ]
    )


def clock_of_rounds(monkeypatch):
    """A clock that moves 100 s each time the trainer asks whether another round fits (after
    every round but a run's last), and stands still for the campaign: where the budget stops
    training is then exact, however fast this machine is."""
    start, ticks = time.time(), []

    def tick():
        ticks.append(None)
        return start + 100 * len(ticks)

    monkeypatch.setattr(timed_rounds, "time", types.SimpleNamespace(time=tick, perf_counter=time.perf_counter))
    monkeypatch.setattr(campaign_train, "time", types.SimpleNamespace(time=lambda: start + 100 * len(ticks)))


def dry_run_jobs(project: Path) -> dict[str, int]:
    """The job counts of `snakemake -n` for the target (Snakemake's "Job stats" block)."""
    proc = snakemake(project, "-n", "--config", "scale=smoke", "device=cpu", "--", TARGET)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return job_counts(proc.stdout)


def test_the_offline_cycle_stops_in_time_continues_elsewhere_and_ships_a_table(tmp_path, monkeypatch, capsys):
    first, second = checkout(tmp_path / "first"), checkout(tmp_path / "second")
    state = tmp_path / "carry" / "state.tar.gz"

    # session 1: a budget (less 30 s to write the state) on that clock that ends half a tick after
    # 4 runs of SMOKE_ROUNDS rounds (a tick after each but the last) and 2 ticks: the 5th run
    # stops after its second round, as the third would pass the budget
    budget_s = (4 * (SMOKE_ROUNDS - 1) + 1.5) * 100 + 30
    with monkeypatch.context() as patch:
        clock_of_rounds(patch)
        assert train(first, state, budget_s / 60) == 0
    manifest, members = read_state(state)
    finished = sorted({m.split("/")[1] for m in members if m.startswith("finished/")})
    progress = sorted({m.split("/")[1] for m in members if m.startswith("progress/")})
    assert len(finished) == 4 and len(progress) == 1, capsys.readouterr()
    assert members[f"progress/{progress[0]}/metrics.jsonl"].count(b"\n") == 2
    assert not any(m.endswith("model.pt") for m in members)

    capsys.readouterr()
    assert main(["status", TARGET, "--state", str(state), "--root", str(tmp_path / "elsewhere")]) == 0
    assert capsys.readouterr().out.startswith(f"{TARGET}: 4 finished, 1 in progress, 3 missing;")

    # the laptop imports session 1: seed 0 of every method, a partial table
    assert main(["import", str(state), "--root", str(first)]) == 0
    assert "holds smoke-scale runs (a rehearsal?)" in capsys.readouterr().out  # results/shipped/ is committed
    table = first / "results" / "shipped" / "tables" / "smoke" / "fedcad" / "table4"
    assert "partial: 4 of 4 rows, seeds [0] of [0, 1]" in (table / "table.tex").read_text()
    assert "fedcad/table4" in (first / "results" / "shipped" / "README.md").read_text()

    # session 2, a fresh checkout: continues from the state file, split into parts
    assert train(second, state, 60, "--part-mib", "0.004") == 0  # a bound: it ends when the runs do
    assert not state.exists() and len(list(state.parent.glob("state.tar.gz.part-*"))) >= 2
    assert "4 finished and 1 checkpointed runs restored" in capsys.readouterr().out
    assert len({m.split("/")[1] for m in read_state(state)[1] if m.startswith("finished/")}) == 8

    assert main(["import", str(state), "--root", str(first)]) == 0
    assert "4 shipped already" in capsys.readouterr().out
    assert "partial" not in (table / "table.tex").read_text()
    assert len(list((first / "results" / "shipped" / "runs").glob("*/metrics.json"))) == 8

    # a fresh clone with the shipped runs: the workflow trains nothing
    shutil.rmtree(first / "results" / "runs")
    assert "run" not in dry_run_jobs(first)

    # the run stopped mid-way, resumed in the other checkout, equals an uninterrupted one
    resumed = json.loads((second / "results" / "runs" / progress[0] / "metrics.json").read_text())
    written = yaml.safe_load((second / "results" / "runs" / progress[0] / "config.yaml").read_text())
    written.pop("run_id")
    cfg = load_config(None, deep_merge(written, {"trainer": {"device": "cpu", "progress": False}}))
    assert run_id(cfg) == progress[0]
    straight = trainer.run(cfg, tmp_path / "straight")
    for key in ("global_acc", "global_loss", "local_acc", "final_acc", "per_class_acc"):
        assert resumed[key] == straight[key], key


def test_a_damaged_state_file_is_refused_in_one_line(tmp_path, capsys):
    root, state, rid = tmp_path / "project", tmp_path / "state.tar", "0123456789abcdef"
    write_state(
        state,
        [(f"finished/{rid}/{name}", b'{"status": "completed"}', 0.0) for name in ("config.yaml", "metrics.json")],
        {"targets": [TARGET], "scale": "smoke", "copy": None},
    )
    assert read_state(state)[1][f"finished/{rid}/metrics.json"] == b'{"status": "completed"}'
    with tarfile.open(state) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]
    with tarfile.open(state, "w") as tar:
        for member, data in members:
            data = data.replace(b"completed", b"COMPLETED") if member.name.endswith("metrics.json") else data
            tar.addfile(member, io.BytesIO(data))
    capsys.readouterr()
    assert main(["import", str(state), "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "fails its checksum" in err and err.count("\n") == 1
    assert not (root / "results" / "shipped").exists()


def tiny_state(state: Path, content: bytes, part_mib: float) -> None:
    rid = "0123456789abcdef"
    files = [(f"progress/{rid}/{name}", content, 0.0) for name in ("config.yaml", "metrics.jsonl", "checkpoint.pt")]
    write_state(state, files, {"targets": [TARGET], "scale": "smoke", "copy": None}, part_mib)


@pytest.mark.parametrize("older_parts", [False, True])
def test_a_whole_state_and_parts_side_by_side_read_the_later_one_and_set_the_other_aside(tmp_path, capsys, older_parts):
    """Carried from two machines (or a save cut short): the valid state written later is read,
    the other left untouched by a reader and moved aside (never deleted) by the state's owner,
    with a one-line note naming both."""
    state, elsewhere = tmp_path / "state.tar.gz", tmp_path / "elsewhere" / "state.tar.gz"
    big = np.random.default_rng(0).bytes(5000)  # incompressible: split at 0.001 MiB
    tiny_state(state if older_parts else elsewhere, b"older" + big, 0.001 if older_parts else 15)
    tiny_state(elsewhere if older_parts else state, b"newer" + big, 15 if older_parts else 0.001)
    for carried in elsewhere.parent.iterdir():
        shutil.copy(carried, state.parent)
    assert state.is_file() and campaign_state.part_paths(state)
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    members = read_state(state)[1]  # a reader that does not own the state (import, status) touches nothing
    assert "untouched" in capsys.readouterr().err and sorted(p.name for p in tmp_path.iterdir()) == before
    assert read_state(state, owner=True)[1] == members  # its owner (train) sets the other aside
    assert members["progress/0123456789abcdef/checkpoint.pt"].startswith(b"newer")
    err = capsys.readouterr().err
    assert err.startswith("note: ") and err.count("\n") == 1 and "set aside" in err
    assert state.is_file() == older_parts and bool(campaign_state.part_paths(state)) != older_parts
    assert list(tmp_path.glob("state.tar.gz*.older-*"))  # the other kept aside
    assert read_state(state)[1] == members and capsys.readouterr().err == ""


def write_copy(path: Path, classes) -> Path:
    """An image-folder zip shaped like a copy of CIFAR-10 (two tiny PNGs per class and split)."""
    rng = np.random.default_rng(0)
    with zipfile.ZipFile(path, "w") as archive:
        for split in ("train", "test"):
            for name in classes:
                for i in range(2):
                    image = Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
                    buffer = io.BytesIO()
                    image.save(buffer, format="PNG")
                    archive.writestr(f"{split}/{name}/{i:04d}.png", buffer.getvalue())
    return path


def test_a_copy_named_by_its_digest_is_labelled_by_its_kind_where_the_data_root_holds_it(tmp_path, capsys):
    copies = tmp_path / "data" / "copies"
    copies.mkdir(parents=True)
    sha = file_digest(write_copy(copies / "mine.zip", CIFAR["cifar10"]["classes"]), "sha256")
    for root, label in ((tmp_path / "data", "PNG copy"), (tmp_path / "elsewhere", "on CIFAR-10, copy")):
        status = ["status", "papers/fedcad/table4", "--copy", f"cifar10={sha}", "--scale", "smoke"]
        assert main([*status, "--root", str(tmp_path), "--data-root", str(root)]) == 0
        assert f"{label} sha256 {sha[:7]}" in capsys.readouterr().out
    bundle = ["bundle", "papers/fedcad/table4", "--copy", f"cifar10={sha}", "--scale", "smoke", "--no-wheels"]
    assert (
        main([*bundle, "-o", str(tmp_path / "carry"), "--root", str(tmp_path), "--data-root", str(copies.parent)]) == 0
    )
    carried = tmp_path / "carry" / "data" / "copies" / "mine.zip.gz"  # the file the data root holds, carried
    assert gzip.decompress(carried.read_bytes()) == (copies / "mine.zip").read_bytes()


def test_a_run_on_a_copy_has_its_own_id_from_its_content_and_the_official_classes(tmp_path, capsys):
    copies = tmp_path / "data" / "copies"
    copies.mkdir(parents=True)
    sha = file_digest(write_copy(copies / "mine.zip", CIFAR["cifar10"]["classes"]), "sha256")
    official = load_config(None, {"dataset": {"name": "cifar10"}, "data_root": str(tmp_path / "data")})
    on_copy = load_config(None, {"dataset": {"name": "cifar10", "copy": sha}, "data_root": str(tmp_path / "data")})
    assert run_id(on_copy) != run_id(official)
    (copies / "mine.zip").rename(copies / "renamed.zip")  # found by content: the name is no part of it
    dataset = load_dataset(on_copy)
    assert dataset.classes == list(CIFAR["cifar10"]["classes"]) and dataset.mean == CIFAR["cifar10"]["mean"]
    assert len(dataset.train) == 20 and dataset.train.y.tolist()[:4] == [0, 0, 1, 1]
    assert Copy("cifar10", sha, "JPEG").label == f"CIFAR-10, JPEG copy sha256 {sha[:7]}…"

    bundle = tmp_path / "carry"
    assert (
        main(
            [
                "bundle",
                "papers/fedcad/table4",
                "--copy",
                f"cifar10={copies / 'renamed.zip'}",
                "--no-wheels",
                "-o",
                str(bundle),
                "--root",
                str(tmp_path),
            ]
        )
        == 0
    )
    packed = bundle / "data" / "copies" / "renamed.zip.gz"  # a copy travels packed, and unpacks to its bytes
    assert gzip.decompress(packed.read_bytes()) == (copies / "renamed.zip").read_bytes()
    assert not (bundle / "data" / "copies" / "renamed.zip").exists()
    assert check_carry(bundle, ["papers/fedcad/table4"], None).scale == "paper"  # the session's check unpacks it
    assert (bundle / "data" / "copies" / "renamed.zip").read_bytes() == (copies / "renamed.zip").read_bytes()
    (bundle / "data" / "copies" / "renamed.zip").unlink()  # and `train` on the bundle's data without a session
    train_there = ["train", "papers/fedcad/table4", "--copy", f"cifar10={sha}", "--minutes", "0.001"]
    capsys.readouterr()
    main([*train_there, "--data-root", str(bundle / "data"), "--state", str(tmp_path / "there.tar.gz")])
    assert "exceeds the 20 training samples" in capsys.readouterr().err  # the copy was read: too small to split
    assert (bundle / "data" / "copies" / "renamed.zip").read_bytes() == (copies / "renamed.zip").read_bytes()
    manifest = read_state(bundle / "state.tar.gz")[0]  # a first state where the session reads it: it needs no --copy
    assert manifest["copy"]["sha256"] == sha and manifest["targets"] == ["papers/fedcad/table4"]
    again = [
        "bundle",
        "papers/fedcad/table4",
        "--copy",
        f"cifar10={copies / 'renamed.zip'}",
        "--no-wheels",
        "-o",
        str(bundle),
        "--root",
        str(tmp_path),
    ]
    shutil.copy(bundle / "state.tar.gz", tmp_path / "same.tar.gz")
    assert main([*again, "--state", str(tmp_path / "same.tar.gz")]) == 0  # the same bytes: nothing to refuse
    write_state(tmp_path / "other.tar.gz", [], {"targets": ["papers/fedcad/table4"], "scale": "paper", "copy": None})
    newer = (bundle / "state.tar.gz").read_bytes()
    capsys.readouterr()
    assert main([*again, "--state", str(tmp_path / "other.tar.gz")]) == 2  # would overwrite the session's state
    assert "holds another state than --state" in capsys.readouterr().err
    assert (bundle / "state.tar.gz").read_bytes() == newer and not campaign_state.part_paths(bundle / "state.tar.gz")

    with pytest.raises(DataError, match="no file with that SHA-256"):
        load_dataset(
            load_config(None, {"dataset": {"name": "cifar10", "copy": "0" * 64}, "data_root": str(tmp_path / "data")})
        )
    other = file_digest(write_copy(copies / "other.zip", [f"c{i}" for i in range(10)]), "sha256")
    with pytest.raises(DataError, match="are not cifar10's"):
        load_dataset(
            load_config(None, {"dataset": {"name": "cifar10", "copy": other}, "data_root": str(tmp_path / "data")})
        )
    with pytest.raises(ConfigError, match="dataset.copy applies to cifar10, not dataset.name=cifar100"):
        load_config(None, {"dataset": {"name": "cifar100", "copy": sha}})
    with pytest.raises(ConfigError, match="must be a SHA-256"):
        load_config(None, {"dataset": {"name": "cifar10", "copy": "dfaab4e"}})


def test_sigterm_stops_training_as_the_budget_does_and_writes_the_state(tmp_path):
    """A session's `timeout` (or a scheduler) may still kill a round that overran: the state
    file then keeps the finished runs and the last checkpoint."""
    root, state = checkout(tmp_path / "project"), tmp_path / "state.tar.gz"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shared.campaign",
            "train",
            TARGET,
            "--scale",
            "smoke",
            "--device",
            "cpu",
            "--minutes",
            "10",
            "--state",
            str(state),
            "--root",
            str(root),
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    waited = 0.0
    while not list((root / "results" / "runs").glob("*/checkpoint.pt")) and waited < 120:
        time.sleep(0.05)
        waited += 0.05
    proc.terminate()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "stopped by SIGTERM" in err
    members = read_state(state)[1]
    assert any(m.startswith(("progress/", "finished/")) for m in members)


def finish_for_table(runs_dir: Path, rid: str, final_acc: float) -> None:
    """A finished run as far as a table or a figure reads it: its metrics.json."""
    (runs_dir / rid).mkdir(parents=True, exist_ok=True)
    (runs_dir / rid / "metrics.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "run_id": rid,
                "final_acc": final_acc,
                "best_acc": final_acc,
                "eval_rounds": [1, 2],
                "global_acc": [50.0, final_acc],
                "local_acc": [40.0, 45.0],
                "wall_time_s": 10.0,
                "device": "cuda:0",
            }
        )
    )


def test_a_shipped_table_on_a_copy_is_its_part_on_the_copy_labelled_and_partial(tmp_path):
    """FedCAD Table 4 on the JPEG copy with seed 0 of three of its four methods shipped (stood
    in for by a metrics.json, all a table reads): its own folder, the label and the partial
    mark in every caption, the missing method left out."""
    shipped = tmp_path / "results" / "shipped"
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    for cell in expand(get_table("fedcad", "table4"), "paper", {"dataset": {"copy": copy.sha256}}):
        if cell.seed == 0 and cell.row.label != "FedCAD":
            finish_for_table(shipped / "runs", cell.run_id, 60.0)
    out = build_shipped_table(TARGET, "paper", copy, shipped)
    assert out == shipped / "tables" / "cifar10-jpeg-copy-dfaab4e" / "fedcad" / "table4"
    label, partial = "CIFAR-10, JPEG copy sha256 dfaab4e", "partial: 3 of 4 rows, seeds [0] of [0, 1, 2]"
    for name in ("table.tex", "comparison.md", "comparison.html"):
        text = (out / name).read_text()
        assert label in text and partial in text, name
    assert "FedCAD" not in set(pd.read_csv(out / "table.csv").row)
    for name in ("table.csv", "comparison.csv"):  # a CSV read alone names its data too
        assert set(pd.read_csv(out / name).data) == {copy.label}, name
    for name in ("claims.md", "claims.html"):  # as the captions name it
        assert label in (out / name).read_text(), name
    assert "cifar10-jpeg-copy-dfaab4e" in (out / "table.tex").read_text()  # its LaTeX label
    provenance = yaml.safe_load((out / "provenance.yaml").read_text())
    assert provenance["data"].startswith(label) and provenance["partial"] == partial
    write_listing(shipped)
    assert "tables/cifar10-jpeg-copy-dfaab4e/fedcad/table4" in (shipped / "README.md").read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["train", "papers/fedcad/table9", "--minutes", "1", "--state", "{state}"],
            "papers/fedcad/table9 is not a target; valid for fedcad: table1",
        ),
        (["train", TARGET, "--scale", "paper", "--minutes", "1", "--state", "{state}"], "holds runs at scale smoke"),
        (
            ["train", TARGET, "--copy", "cifar10=" + "0" * 64, "--minutes", "1", "--state", "{state}"],
            "holds runs on the official data",
        ),
        (
            ["train", TARGET, "--copy", "cifar10=absent.zip", "--minutes", "1", "--state", "{fresh}"],
            "absent.zip is not a file",
        ),
        (
            [
                "train",
                "papers/fedssd/table2",
                "--copy",
                "cifar10=" + "0" * 64,
                "--minutes",
                "1",
                "--state",
                "{fresh}",
                "--data-root",
                "{tmp}",
            ],
            "no file with that SHA-256",
        ),
        (["train", TARGET, "--minutes", "1", "--state", "{state}", "--max-parts", "0"], "--max-parts 0"),
        (["train", TARGET, "--minutes", "1", "--state", "{state}", "--part-mib", "0"], "--part-mib 0"),
        (["bundle", TARGET, "-o", "{tmp}/carry", "--max-parts", "101", "--no-wheels"], "--max-parts 101"),
        (["import", "{fresh}"], "does not exist"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_training(tmp_path, capsys, argv, message):
    state = tmp_path / "state.tar.gz"
    write_state(state, [], {"targets": [TARGET], "scale": "smoke", "copy": None})
    names = {"state": str(state), "fresh": str(tmp_path / "fresh.tar.gz"), "tmp": str(tmp_path)}
    assert main([arg.format(**names) for arg in argv] + ["--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "results" / "runs").exists()


def test_a_shipped_figure_on_a_copy_is_drawn_from_its_finished_part_then_whole_and_labelled(tmp_path):
    shipped = tmp_path / "results" / "shipped"
    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    cells = get_figure("fedssd", "fig9").cells("paper", {"dataset": {"copy": copy.sha256}})
    for i, cell in enumerate(cells):
        if i:  # the first run comes last
            finish_for_table(shipped / "runs", cell.run_id, 60.0 + i % 7)
    out = build_shipped_figure("papers/fedssd/fig9", "paper", copy, shipped)
    provenance = yaml.safe_load((out / "provenance.yaml").read_text())
    assert provenance["partial"].startswith("partial: ") and cells[0].run_id not in provenance["runs"]
    finish_for_table(shipped / "runs", cells[0].run_id, 60.0)
    out = build_shipped_figure("papers/fedssd/fig9", "paper", copy, shipped)
    assert (
        out == shipped / "tables" / "cifar10-jpeg-copy-dfaab4e" / "fedssd" / "fig9" and (out / "figure.png").is_file()
    )
    provenance = yaml.safe_load((out / "provenance.yaml").read_text())
    assert "CIFAR-10, JPEG copy sha256 dfaab4e" in provenance["caption"] and provenance["partial"] is False
    assert sorted(provenance["runs"]) == sorted(c.run_id for c in cells)
    write_listing(shipped)
    assert "fedssd/fig9/figure.png" in (shipped / "README.md").read_text()


def test_the_memo_of_copies_digests_is_written_only_when_it_changes(tmp_path):
    from shared.data.catalog import find_copy
    from shared.targets.copies import located_copy

    copies = tmp_path / "copies"
    copies.mkdir()
    sha = file_digest(write_copy(copies / "mine.zip", CIFAR["cifar10"]["classes"]), "sha256")
    memo = tmp_path / "cache" / "copies.json"
    # the workflow locates the copy while Snakemake reads it, which writes nothing
    assert located_copy(f"cifar10={sha}", tmp_path).path == copies / "mine.zip" and not memo.parent.exists()
    assert find_copy(tmp_path, sha) == copies / "mine.zip"
    written = memo.stat().st_mtime_ns, memo.stat().st_ino
    assert find_copy(tmp_path, sha) == copies / "mine.zip"  # a second run's start: nothing new to remember
    assert (memo.stat().st_mtime_ns, memo.stat().st_ino) == written
    assert list(memo.parent.iterdir()) == [memo]  # no temporary file left


def summary(rid: str, status: str) -> bytes:
    return json.dumps(
        {
            "status": status,
            "run_id": rid,
            "final_acc": 10.0,
            "best_acc": 10.0,
            "eval_rounds": [1],
            "global_acc": [10.0],
            "local_acc": [],
            "wall_time_s": 1.0,
        }
    ).encode()


def put_run(run_dir: Path, rid: str, status: str, checkpoint: bool = False) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(f"run_id: {rid}\n")
    (run_dir / "metrics.jsonl").write_text('{"round": 1}\n')
    (run_dir / "metrics.json").write_bytes(summary(rid, status))
    if checkpoint:
        (run_dir / "checkpoint.pt").write_bytes(b"weights")


def test_a_recorded_failure_is_no_finished_run_anywhere_and_a_diverged_run_is(tmp_path, capsys):
    """A metrics.json that records a failure (the workflow's last attempt) is neither packed nor
    shipped as finished, never blocks training the run again, and is replaced (moved aside) by
    a result; a diverged run is a result (shared/runs/files.py FINAL)."""
    from shared.campaign.ship import ship
    from shared.campaign.state import restore, state_members
    from shared.runs.shipped import is_finished, restore_shipped

    runs, shipped = tmp_path / "results" / "runs", tmp_path / "results" / "shipped" / "runs"
    failed, diverged, elsewhere = "a" * 16, "b" * 16, "c" * 16
    put_run(runs / failed, failed, "failed: RuntimeError: CUDA error", checkpoint=True)
    put_run(runs / diverged, diverged, "diverged: loss is nan")
    assert not is_finished(failed, runs, shipped) and is_finished(diverged, runs, shipped)
    members = {name: data for name, data, _ in state_members([failed, diverged], runs)}
    assert f"finished/{diverged}/metrics.json" in members and f"progress/{failed}/checkpoint.pt" in members
    assert not any(name.startswith(f"finished/{failed}") for name in members)

    # a state written before failures were told apart: its recorded failure is not shipped
    members[f"finished/{elsewhere}/metrics.json"] = summary(elsewhere, "failed: OutOfMemoryError")
    assert ship(members, shipped) == {"shipped": [diverged], "kept": []}
    assert restore(members, tmp_path / "other", shipped)["finished"] == []

    # a shipped failure is not copied for the workflow; a shipped result replaces a local failure
    put_run(shipped / failed, failed, "failed: RuntimeError: CUDA error")
    assert restore_shipped([failed], tmp_path / "fresh", shipped) == 0 and not (tmp_path / "fresh" / failed).exists()
    (shipped / failed / "metrics.json").write_bytes(summary(failed, "completed"))
    assert restore_shipped([failed, diverged], runs, shipped) == 1
    assert json.loads((runs / failed / "metrics.json").read_text())["status"] == "completed"
    assert not (runs / failed / "checkpoint.pt").exists()
    aside = list((runs / failed).glob("metrics.json.replaced-*"))
    assert len(aside) == 1 and b"CUDA error" in aside[0].read_bytes()  # nothing is lost
    assert "held no result" in capsys.readouterr().err


def test_status_counts_a_carried_failure_as_missing_and_a_carried_result_as_finished(tmp_path, capsys):
    """An old state's recorded failure (written before failures were told apart) is no finished run."""
    state, (first, second, *_) = tmp_path / "state.tar.gz", campaign_runs([TARGET], "smoke", None)[0]
    configs = campaign_runs([TARGET], "smoke", None)[0]
    files = [
        (f"finished/{first}/metrics.json", summary(first, "failed: OutOfMemoryError"), 0.0),
        *((f"finished/{second}/{name}", data, 0.0) for name, data in finished_files(configs[second]).items()),
    ]
    write_state(state, files, {"targets": [TARGET], "scale": "smoke", "copy": None})
    capsys.readouterr()
    assert main(["status", TARGET, "--state", str(state), "--root", str(tmp_path)]) == 0
    assert f"{TARGET}: 1 finished, 0 in progress, 7 missing" in capsys.readouterr().out


def test_a_recorded_failure_is_trained_again_and_its_result_carried(tmp_path, monkeypatch):
    """`train` trains a run whose metrics.json records a failure, in the order it would train
    it missing (here the first), and the state carries the result."""
    root, state = checkout(tmp_path / "project"), tmp_path / "state.tar.gz"
    first = next(iter(campaign_runs([TARGET], "smoke", None)[0]))
    put_run(root / "results" / "runs" / first, first, "failed: RuntimeError: CUDA error")
    with monkeypatch.context() as patch:  # a budget of one run's rounds
        clock_of_rounds(patch)
        assert train(root, state, ((SMOKE_ROUNDS - 1) * 100 + 50 + 30) / 60) == 0
    members = read_state(state)[1]
    assert json.loads(members[f"finished/{first}/metrics.json"])["status"] == "completed"
    assert len(list((root / "results" / "runs" / first).glob("metrics.json.failed-*"))) == 1


def test_writes_into_runs_take_their_lock_and_leave_a_run_being_trained_alone(tmp_path, capsys):
    """A trainer (a Snakemake job, another campaign) holding a run's lock: `import` and `train`
    refuse in one line before writing anything; the workflow's copy of shipped runs leaves that
    run to its trainer."""
    from shared.campaign.ship import ship
    from shared.campaign.state import restore
    from shared.runs.files import hold_lock
    from shared.runs.locking import RunBusy
    from shared.runs.shipped import restore_shipped

    runs, shipped = tmp_path / "results" / "runs", tmp_path / "results" / "shipped" / "runs"
    rid, other = "d" * 16, "e" * 16
    members = {
        f"finished/{r}/{name}": data
        for r in (rid, other)
        for name, data in (("config.yaml", f"run_id: {r}\n".encode()), ("metrics.json", summary(r, "completed")))
    }
    (runs / rid).mkdir(parents=True)
    (shipped / rid).mkdir(parents=True)
    with hold_lock(runs / rid / ".lock"), hold_lock(shipped / rid / ".lock"):
        with pytest.raises(RunBusy, match=f"run {rid} is being trained"):
            restore(members, runs, tmp_path / "nothing shipped")
        with pytest.raises(RunBusy, match=f"run {rid} is being trained"):
            ship(members, shipped)
        assert not (runs / rid / "metrics.json").exists() and not (runs / other / "metrics.json").exists()
        assert not (shipped / other).exists()
        put_run(tmp_path / "shipped2" / rid, rid, "completed")
        put_run(tmp_path / "shipped2" / other, other, "completed")
        assert restore_shipped([rid, other], runs, tmp_path / "shipped2") == 1
        assert "is being trained" in capsys.readouterr().err
        assert not (runs / rid / "metrics.json").exists() and (runs / other / "metrics.json").exists()
    # `import` of a state with a held run's checkpoint: refused before it ships anything (genuine
    # runs of the target, which the state's checks let through)
    runs_of = campaign_runs([TARGET], "smoke", None)[0]
    (held, held_cfg), (finished, finished_cfg) = list(runs_of.items())[:2]
    (runs / held).mkdir(parents=True)
    with hold_lock(runs / held / ".lock"):
        state, rid = tmp_path / "state.tar.gz", held
        write_genuine_state(state, {"targets": [TARGET], "scale": "smoke", "copy": None}, [finished_cfg], [held_cfg])
        assert main(["import", str(state), "--root", str(tmp_path)]) == 2
        assert f"run {rid} is being trained" in capsys.readouterr().err and not (shipped / finished).exists()


def test_a_command_reads_and_verifies_its_state_file_once(tmp_path, monkeypatch, capsys):
    root, state = tmp_path / "project", tmp_path / "state.tar.gz"
    write_state(state, [], {"targets": [TARGET], "scale": "smoke", "copy": None})
    reads = []
    monkeypatch.setattr(
        campaign_state,
        "read_state",
        lambda path, *args, real=campaign_state.read_state, **kwargs: reads.append(path) or real(path, *args, **kwargs),
    )
    assert main(["status", TARGET, "--state", str(state), "--root", str(root)]) == 0
    assert len(reads) == 1
    assert (
        main(["train", TARGET, "--device", "cpu", "--minutes", "0.01", "--state", str(state), "--root", str(root)]) == 0
    )
    assert len(reads) == 2


def test_a_partial_table_leaves_out_the_claims_on_methods_not_finished(tmp_path):
    """FedSSD Table II with seed 0 of FedAvg alone shipped (its group trains first): the table
    is built, partial, its claims on FedSSD's cells not measured yet instead of failing the import."""
    shipped = tmp_path / "results" / "shipped"
    for cell in expand(get_table("fedssd", "table2"), "paper"):
        if cell.seed == 0 and cell.row.label == "FedAvg":
            finish_for_table(shipped / "runs", cell.run_id, 60.0)
    out = build_shipped_table("papers/fedssd/table2", "paper", None, shipped)
    assert "partial: 1 of 8 rows, seeds [0] of [0, 1, 2]" in (out / "table.tex").read_text()
    assert set(pd.read_csv(out / "table.csv").row) >= {"FedAvg"} and (out / "claims.md").is_file()
    write_listing(shipped)
    assert "(partial: 1 of 8 rows" in (shipped / "README.md").read_text()


def test_a_group_stops_between_rounds_carries_every_members_checkpoint_and_ships(tmp_path, monkeypatch, capsys):
    """FedCAD Table 2's first group (seed 0 of one method across its settings) trains in one
    batched step (--clients-per-step 2 asks for it on a CPU): the budget stops it after round 1
    with each member's checkpoint in the state; a second machine finishes the group from the
    state, and `import` ships its runs."""
    target, first, second = "papers/fedcad/table2", tmp_path / "first", checkout(tmp_path / "second")
    state = tmp_path / "carry" / "state.tar.gz"
    runs = campaign_runs([target], "smoke", None)[0]
    group = campaign_train.training_units(
        runs, types.SimpleNamespace(device="cpu", data_root=None, clients_per_step=2)
    )[0]
    assert len(group) == 4 and len({runs[rid].seed for rid in group}) == 1

    def train_group(root: Path, deadline_s: float) -> None:  # the clock ticks at each member's check
        with monkeypatch.context() as patch:
            clock_of_rounds(patch)
            # a round of any unit a tick: no part of the group finishes in the first budget, so
            # it starts whole (shared/campaign/unit_sizing.py), and the whole group finishes in the second
            patch.setattr(unit_sizing, "round_seconds", lambda cfgs, measured: unit_sizing.Estimate(100.0, "test"))
            assert (
                main(
                    [
                        "train",
                        target,
                        "--scale",
                        "smoke",
                        "--device",
                        "cpu",
                        "--clients-per-step",
                        "2",
                        "--minutes",
                        str((deadline_s + 30) / 60),
                        "--state",
                        str(state),
                        "--root",
                        str(root),
                    ]
                )
                == 0
            )

    train_group(checkout(first), 150)  # the second member's check after round 1 is past it
    members = read_state(state)[1]
    assert {m.split("/")[1] for m in members} == set(group) and not any(m.startswith("finished/") for m in members)
    assert all(members[f"progress/{rid}/metrics.jsonl"].count(b"\n") == 1 for rid in group)
    assert all(f"progress/{rid}/checkpoint.pt" in members for rid in group)

    train_group(second, 2 * len(group) * 100 + 50)  # rounds 2 to 4, then no time for the next group
    finished = {m.split("/")[1] for m in read_state(state)[1] if m.startswith("finished/")}
    assert finished == set(group), capsys.readouterr()
    assert main(["import", str(state), "--root", str(first)]) == 0
    shipped = first / "results" / "shipped" / "runs"
    assert {p.parent.name for p in shipped.glob("*/metrics.json")} == set(group)
    assert all(
        json.loads((shipped / rid / "metrics.json").read_text())["rounds_completed"] == SMOKE_ROUNDS for rid in group
    )


def test_a_refused_group_trains_one_run_after_another_and_a_failure_skips_no_other(tmp_path, monkeypatch, capsys):
    """GroupRefused (here: a CPU, no clients_per_step asked) falls back to one run after another,
    where a run that raises is said in one line and the next still trains; a held lock
    (ConfigError) is no refusal of the group: it is raised, not trained around."""
    runs, _ = campaign_runs([TARGET], "smoke", None)
    from shared.targets.run_groups import form_groups

    group = form_groups(runs, campaign_train.GROUP_LIMIT)[0][:2]
    trained = []

    def run(cfg, out, deadline=None):
        trained.append(out.name)
        if len(trained) == 1:
            raise RuntimeError("a bug in the first run")

    monkeypatch.setattr(timed_rounds, "run_timed", run)
    alone = types.SimpleNamespace(device="cpu", data_root=None, clients_per_step=1)
    assert campaign_train.train_unit(group, runs, alone, time.time() + 60, tmp_path) == [group[0]]
    assert trained == group
    err = capsys.readouterr().err
    assert "2 runs train one after another: on a CPU" in err and f"run {group[0]} raised RuntimeError" in err

    from shared.runs.files import hold_lock

    (tmp_path / group[0]).mkdir(exist_ok=True)
    held = hold_lock(tmp_path / group[0] / ".lock")
    batched = types.SimpleNamespace(device="cpu", data_root=None, clients_per_step=2)
    with pytest.raises(ConfigError, match="another process"):
        campaign_train.train_unit(group, runs, batched, time.time() + 60, tmp_path)
    held.close()
    assert "one after another" not in capsys.readouterr().err and trained == group


def test_a_sigterm_during_a_save_is_handled_once_the_state_is_written(tmp_path):
    import os
    import signal

    campaign_train.stop_on_sigterm()
    try:
        with pytest.raises(timed_rounds.OutOfTime, match="SIGTERM"):
            with campaign_train.sigterm_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                tiny_state(tmp_path / "state.tar.gz", b"saved", 15)  # not cut short by the signal
        assert read_state(tmp_path / "state.tar.gz")[1]["progress/0123456789abcdef/checkpoint.pt"] == b"saved"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
