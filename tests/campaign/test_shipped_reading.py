"""The other doors, found by a second adversarial review: the tracked shipped tree (any clone
that pushed writes it), a copy given as --copy, an image folder, a run directory given to
`python -m shared.curves`. Each crafted input is named in one line or left out, never a
traceback; what a shipped run holds reaches a table only once it passes import's checks."""

import io
import json
import os
import shutil
import time
import zipfile

import numpy as np
import pytest
from PIL import Image

from shared.campaign.cli import main
from shared.campaign.shipped_reading import listing_entry, shipped_run_problem
from shared.curves import main as curves_main
from shared.data.catalog import DataError
from shared.data.datasets import MAX_IMAGE_PIXELS, convert_image_folder
from shared.runs.files import holds_result, read_history
from tests.campaign.test_campaign_trust import SHOT, TARGET, crafted, edited_summary, err_lines, import_crafted

pytestmark = pytest.mark.usefixtures("small_floor")


@pytest.fixture
def project(genuine, tmp_path, monkeypatch, capsys):
    """A project whose results/shipped/ holds the genuine state's two finished runs."""
    code, root, _ = import_crafted(crafted(genuine), tmp_path, monkeypatch)
    assert code == 0, err_lines(capsys)
    capsys.readouterr()
    return root


def shipped_run(root):
    return root / "results" / "shipped" / "runs" / SHOT


def status_lines(root, capsys) -> tuple[int, list[str]]:
    code = main(["status", TARGET, "--scale", "smoke", "--root", str(root)])
    return code, err_lines(capsys)


def test_a_shipped_summary_edited_by_hand_is_named_and_never_restored(project, capsys):
    run = shipped_run(project)
    files = {name: (run / name).read_bytes() for name in ("metrics.json",)}
    (run / "metrics.json").write_bytes(edited_summary(files, final_acc=99.0, best_acc=99.0)["metrics.json"])
    assert "is not what its metrics.jsonl records" in shipped_run_problem(run)
    code, err = status_lines(project, capsys)
    assert len(err) == 1 and err[0].startswith(f"error: shipped run {SHOT} cannot be read"), err


@pytest.mark.parametrize("target", ["secret", "/dev/zero"])
def test_a_link_in_a_shipped_run_is_never_followed(project, tmp_path, capsys, target):
    run = shipped_run(project)
    secret = tmp_path / "secret"
    secret.write_text("SECRET")
    (run / "partition.csv").unlink()
    os.symlink(secret if target == "secret" else target, run / "partition.csv")
    assert shipped_run_problem(run) == "its partition.csv is not a regular file (a link, a folder or a device)"
    code, err = status_lines(project, capsys)
    assert len(err) == 1 and "not a regular file" in err[0], err


def test_a_shipped_summary_nested_past_any_checker_is_no_result(project, capsys):
    run = shipped_run(project)
    (run / "metrics.json").write_text("[" * 200_000 + "]" * 200_000)
    assert not holds_result(run)
    code, err = status_lines(project, capsys)
    assert all(not line.startswith("Traceback") for line in err) and len(err) == 1, err


def test_a_shipped_tables_provenance_alias_bomb_is_named_within_a_second(project):
    table = project / "results" / "shipped" / "tables" / "paper" / "fedssd" / "table2"
    table.mkdir(parents=True)
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    (table / "provenance.yaml").write_text("\n".join(levels) + "\npartial: *a9\n")
    (table / "comparison.md").write_text("")
    started = time.monotonic()
    entry = listing_entry(project / "results" / "shipped", table)
    assert time.monotonic() - started < 1 and "not read" in entry and "anchor or alias" in entry


def test_a_copy_that_is_not_a_zip_is_one_line(tmp_path, capsys):
    fake = tmp_path / "copy.zip"
    fake.write_bytes(b"not a zip")
    assert main(["status", "papers/fedssd/table2", "--copy", f"cifar10={fake}", "--root", str(tmp_path)]) == 2
    err = err_lines(capsys)
    assert len(err) == 1 and "is not a readable zip file" in err[0], err


def image_zip(path, images: dict[str, bytes]):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in images.items():
            archive.writestr(name, data)
    return path


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_an_image_folder_is_read_within_bounds(tmp_path):
    small = png(32, 32)
    cases = {
        "an entry inflating to 70 MiB": {"train/a/0.png": bytes(70 * 2**20), "test/a/0.png": small},
        "an image past the pixel limit": {"train/a/0.png": png(8193, 8192), "test/a/0.png": small},
        "splits of other sizes": {"train/a/0.png": png(64, 64), "test/a/0.png": small},
    }
    for name, images in cases.items():
        with pytest.raises(DataError) as refused:
            convert_image_folder(image_zip(tmp_path / f"{len(name)}.zip", images))
        assert "\n" not in str(refused.value), name
    assert MAX_IMAGE_PIXELS == 8192 * 8192


def test_an_image_folders_splits_are_bounded_together(tmp_path, monkeypatch):
    small = png(32, 32)  # 3,072 bytes decoded; the bound holds three, each split holds two
    monkeypatch.setattr("shared.data.datasets.MAX_DECODED_BYTES", 3 * 32 * 32 * 3)
    images = {f"{split}/a/{i}.png": small for split in ("train", "test") for i in range(2)}
    with pytest.raises(DataError, match="4 images of 32x32"):
        convert_image_folder(image_zip(tmp_path / "splits.zip", images))


def test_curves_name_a_damaged_run_in_one_line_and_escape_what_they_print(tmp_path, capsys):
    run = tmp_path / "x\x1b[2K\x1b[1A\rall good"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps([1]) + "\n" + json.dumps({"round": 1}) + "\n")
    assert curves_main([str(run), "-o", str(tmp_path / "c.png")]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "is not a round's record" in err and err.count("\n") == 2, err
    (run / "metrics.jsonl").write_text("[" * 100_000 + "\n{}\n")
    with pytest.raises(Exception) as damaged:
        read_history(run)
    assert type(damaged.value).__name__ == "RunFilesError"


def test_the_workflow_restores_a_genuine_shipped_run_and_refuses_one_edited_by_hand(project, tmp_path):
    """The restore job (workflow/rules/runs.smk) makes import's checks: the genuine run is
    restored, the edited one fails its job naming it, and no number of it reaches results/runs."""
    from tests.workflow.test_workflow import make_project, snakemake

    workflow = make_project(tmp_path / "workflow")
    shutil.copytree(project / "results" / "shipped", workflow / "results" / "shipped")
    edited = workflow / "results" / "shipped" / "runs" / SHOT
    summary = json.loads((edited / "metrics.json").read_text())
    (edited / "metrics.json").write_text(json.dumps({**summary, "final_acc": 99.0}))
    genuine_run = next(p.name for p in edited.parent.iterdir() if p.name != SHOT)
    outputs = [f"results/runs/{rid}/metrics.json" for rid in (genuine_run, SHOT)]
    done = snakemake(workflow, "--cores", "1", "--keep-going", "--config", "scale=smoke", "device=cpu", "--", *outputs)
    assert done.returncode != 0
    assert (workflow / outputs[0]).is_file() and not (workflow / outputs[1]).exists()
    log = (workflow / "results" / "logs" / "restores" / f"{SHOT}.log").read_text()
    assert log.startswith(f"shipped run {SHOT} cannot be read (its metrics.json's final_acc is not what"), log
    assert "git rm -r results/shipped/runs/" in log
