"""python -m shared.archive: finished runs packed into one file and unpacked elsewhere.

Runs are FedCAD Table 4's at smoke scale (8 runs; the smallest table): two trained for real
(half a second each), the others left unfinished or absent, or, for the workflow's dry runs,
stood in for by a metrics.json, the only file the workflow looks at to call a run finished.
"""

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from shared.archive import MANIFEST, main
from shared.targets.table_declarations import expand, get_table
from shared.training import trainer
from tests.campaign.carried_states import finished_files
from tests.workflow.test_workflow import job_counts, snakemake

ROOT = Path(__file__).resolve().parents[2]
TARGET = "papers/fedcad/table4"


def table_cells(data_root):
    """The table's distinct runs at smoke scale, in table order (its columns collapse at
    smoke scale, which trains every setting for 2 epochs)."""
    runtime = {"trainer": {"device": "cpu", "progress": False}, "data_root": str(data_root)}
    cells = {}
    for cell in expand(get_table("fedcad", "table4"), "smoke", runtime):
        cells.setdefault(cell.run_id, cell)
    return list(cells.values())


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A project with two finished runs of the table, one unfinished (a checkpoint, no
    metrics.json) and five never started."""
    root = tmp_path_factory.mktemp("source")
    cells = table_cells(root / "data")
    assert len(cells) == 8
    runs = root / "results" / "runs"
    for cell in cells[:2]:
        trainer.run(cell.config, runs / cell.run_id)
    unfinished = runs / cells[2].run_id
    unfinished.mkdir(parents=True)
    (unfinished / "config.yaml").write_text("run_id: " + cells[2].run_id + "\n")
    (unfinished / "checkpoint.pt").write_bytes(b"half a run")
    return root, [c.run_id for c in cells]


def pack(root, out, *extra):
    return main(["pack", TARGET, "-o", str(out), "--root", str(root), *extra, "--config", "scale=smoke", "device=cpu"])


def files_under(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def read_manifest(archive: Path) -> dict:
    with tarfile.open(archive, "r:*") as tar:
        return json.loads(tar.extractfile(MANIFEST).read())


@pytest.mark.parametrize("models, suffix", [(True, ".tar.gz"), (False, ".tar")])
def test_round_trip_gives_identical_bytes_of_finished_runs_only(source, tmp_path, capsys, models, suffix):
    root, ids = source
    archive = tmp_path / f"runs{suffix}"
    assert pack(root, archive, *(["--models"] if models else [])) == 0
    assert capsys.readouterr().out.startswith(f"packed 2 of 8 runs needed by {TARGET} at scale=smoke (6 missing")
    manifest = read_manifest(archive)
    assert manifest["runs"] == {"needed": 8, "packed": 2, "missing": 6}
    assert manifest["targets"] == [TARGET] and manifest["scale"] == "smoke" and manifest["packing_seconds"] >= 0
    assert manifest["format"] == "fedrepro-runs/2" and manifest["kind"] == "archive" and manifest["written_at"]
    assert [r["run_id"] for r in manifest["packed"]] == ids[:2] and {r["status"] for r in manifest["packed"]} == {
        "completed"
    }
    assert {r["run_id"]: r["state"] for r in manifest["missing"]} == {
        ids[2]: "unfinished",
        **{i: "absent" for i in ids[3:]},
    }
    names = {m["path"].rsplit("/", 1)[1] for m in manifest["members"]}
    expected = {"config.yaml", "partition.csv", "metrics.jsonl", "metrics.json"}
    assert names == (expected | {"model.pt"} if models else expected)  # never checkpoint.pt

    into = tmp_path / "fresh"
    assert main(["unpack", str(archive), "--into", str(into)]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"unpacked 2 runs ({len(manifest['members'])} files") and line.count("\n") == 1
    unpacked = {
        name: data for name, data in files_under(into / "results" / "runs").items() if not name.endswith("/.lock")
    }  # each run's lock, held while it was written
    original = {
        name: data
        for name, data in files_under(root / "results" / "runs").items()
        if name.split("/")[0] in ids[:2] and name.split("/")[1] in names
    }
    assert unpacked == original  # the same files, byte for byte; nothing of the unfinished run


def test_a_finished_run_already_there_is_left_as_it_is_and_an_unfinished_one_completed(source, tmp_path, capsys):
    root, ids = source
    archive = tmp_path / "runs.tgz"
    assert pack(root, archive) == 0
    into = tmp_path / "project"
    kept, completed = into / "results" / "runs" / ids[0], into / "results" / "runs" / ids[1]
    kept.mkdir(parents=True)
    here = json.dumps({"status": "completed", "run_id": ids[0], "note": "computed here"})
    (kept / "metrics.json").write_text(here)
    completed.mkdir()
    (completed / "checkpoint.pt").write_bytes(b"round 2 of 3")
    capsys.readouterr()

    assert main(["unpack", str(archive), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert "unpacked 1 runs" in out and "1 already finished there, left as they were (1 of them differ" in out
    assert files_under(kept) == {"metrics.json": here.encode()}
    assert (completed / "metrics.json").read_bytes() == (
        root / "results" / "runs" / ids[1] / "metrics.json"
    ).read_bytes()
    assert not (completed / "checkpoint.pt").exists()  # superseded by the finished run
    assert not list(into.rglob(".*unpack*"))  # no temporary files left


def rewrite(archive: Path, out: Path, change) -> None:
    """A copy of the archive with `change(name, data)` applied to each member's bytes."""
    with tarfile.open(archive, "r:*") as src, tarfile.open(out, "w") as dst:
        for member in src:
            data = change(member.name, src.extractfile(member).read())
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))


def test_a_member_that_fails_its_checksum_is_refused_before_anything_is_written(source, tmp_path, capsys):
    root, ids = source
    archive, tampered = tmp_path / "runs.tar.gz", tmp_path / "tampered.tar"
    assert pack(root, archive) == 0
    victim = f"runs/{ids[1]}/metrics.jsonl"  # the second run: the first is written before it is read
    rewrite(archive, tampered, lambda name, data: data.replace(b"1", b"7", 1) if name == victim else data)
    capsys.readouterr()
    assert main(["unpack", str(tampered), "--into", str(tmp_path / "into")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and victim in err and "checksum" in err
    assert not (tmp_path / "into").exists()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def crafted(path: Path, entries: list[tuple[str, bytes, bytes]], listed: list[tuple[str, bytes]]) -> Path:
    """A tar with members (name, data, tar type) and a manifest listing `listed` (name, data)."""
    manifest = {
        "format": "fedrepro-runs/1",
        "targets": [TARGET],
        "scale": "smoke",
        "members": [{"path": n, "sha256": sha(d), "size": len(d)} for n, d in listed],
    }
    with tarfile.open(path, "w") as tar:
        for name, data, kind in [*entries, (MANIFEST, json.dumps(manifest).encode(), tarfile.REGTYPE)]:
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data) if kind == tarfile.REGTYPE else 0
            info.linkname = "/etc/passwd" if kind != tarfile.REGTYPE else ""
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return path


GOOD = "runs/0123456789abcdef/metrics.json"
UNSAFE = {
    "absolute path": (
        [("/tmp/evil/metrics.json", b"{}", tarfile.REGTYPE)],
        ["/tmp/evil/metrics.json"],
        "absolute path",
    ),
    "dot dot": ([("runs/../../evil.json", b"{}", tarfile.REGTYPE)], ["runs/../../evil.json"], "outside"),
    "symlink": ([(GOOD, b"", tarfile.SYMTYPE)], [], "is a link"),
    "hard link": ([(GOOD, b"", tarfile.LNKTYPE)], [], "is a link"),
    "not in manifest": ([(GOOD, b"{}", tarfile.REGTYPE)], [], "not in the manifest"),
    "not a run file": ([("runs/0123456789abcdef/checkpoint.pt", b"x", tarfile.REGTYPE)], [], "not a run's file"),
    "manifest lists a traversal": ([], ["../../evil.json"], "not a run's file"),
    "manifest lists an absent member": ([], [GOOD], "lacks"),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_archives_are_refused_with_one_line_and_nothing_written(tmp_path, capsys, case):
    entries, listed, message = UNSAFE[case]
    data = {name: d for name, d, _ in entries}
    archive = crafted(tmp_path / "evil.tar", entries, [(n, data.get(n, b"{}")) for n in listed])
    into = tmp_path / "into"
    assert main(["unpack", str(archive), "--into", str(into)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not into.exists() and not (tmp_path / "evil").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["pack", "papers/fedcad/table9"],
            "papers/fedcad/table9 is not a target; valid for fedcad: table1, table2, table3, table4, fig1",
        ),
        (["pack", "papers/nopaper"], "papers/nopaper is not a target (papers/<paper>[/<name>]); valid papers: fedcad"),
        (["pack", TARGET, "--scale", "small", "--config", "scale=smoke"], "disagree"),
        (["pack", TARGET, "--config", "scale"], "expected KEY=VALUE"),
        (["unpack", "absent.tar"], "cannot read"),
    ],
)
def test_bad_targets_and_options_exit_2_with_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(argv + (["-o", "a.tar"] if argv[0] == "pack" else [])) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "a.tar").exists()


# --- the workflow sees unpacked runs as finished --------------------------------------------

PARTS = ("Snakefile", "shared", "papers", "workflow", "config", "profiles")


def project_copy(directory: Path) -> Path:
    directory.mkdir()
    for part in PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(
                src,
                directory / part,
                ignore=lambda d, names: [
                    n
                    for n in names
                    if n == "__pycache__" or (Path(d, n).is_dir() and n.startswith(("table", "fig", "search")))
                ],
            )
        else:
            shutil.copy(src, directory / part)
    return directory


def dry_run_jobs(project: Path) -> dict[str, int]:
    """The job counts of `snakemake -n` for the target (Snakemake's "Job stats" block)."""
    proc = snakemake(project, "-n", "--config", "scale=smoke", "device=cpu", "--", TARGET)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return job_counts(proc.stdout)


def test_after_unpacking_the_workflow_schedules_only_the_missing_runs(tmp_path):
    ids = [c.run_id for c in table_cells(tmp_path / "data")]
    source, project = tmp_path / "source", project_copy(tmp_path / "project")

    configs = {c.run_id: c.config for c in table_cells(tmp_path / "data")}

    def finish(run_ids):  # a run's files as the trainer writes them (unpack checks them all)
        for rid in run_ids:
            for name, data in finished_files(configs[rid]).items():
                (source / "results" / "runs" / rid).mkdir(parents=True, exist_ok=True)
                (source / "results" / "runs" / rid / name).write_bytes(data)

    finish(ids[:5])
    assert pack(source, tmp_path / "some.tar.gz") == 0
    assert main(["unpack", str(tmp_path / "some.tar.gz"), "--into", str(project)]) == 0
    jobs = dry_run_jobs(project)
    assert jobs.get("run") == 3 and jobs["table"] == 1, jobs  # the runs the archive lacked, then the table

    finish(ids[5:])
    assert pack(source, tmp_path / "all.tar.gz") == 0
    assert main(["unpack", str(tmp_path / "all.tar.gz"), "--into", str(project)]) == 0
    jobs = dry_run_jobs(project)
    assert "run" not in jobs and jobs["table"] == 1, jobs


# --- nothing finished is replaced; an archive's runs are what their directories say --------


def test_pack_replaces_no_file_unless_forced_and_never_a_runs_file(source, tmp_path, capsys):
    root, ids = source
    metrics = root / "results" / "runs" / ids[0] / "metrics.json"
    before = metrics.read_bytes()
    assert pack(root, metrics) == 2 and metrics.read_bytes() == before
    assert pack(root, metrics, "--force") == 2 and metrics.read_bytes() == before
    assert "holds the runs' own files" in capsys.readouterr().err
    existing = tmp_path / "mine.tar"
    existing.write_text("a file of mine")
    assert pack(root, existing) == 2 and existing.read_text() == "a file of mine"
    assert "exists; pass --force" in capsys.readouterr().err
    assert pack(root, existing, "--force") == 0 and read_manifest(existing)["runs"]["packed"] == 2


def unpack_error(capsys, archive, into) -> str:
    assert main(["unpack", str(archive), "--into", str(into)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_a_run_whose_files_name_another_run_is_refused(source, tmp_path, capsys):
    root, ids = source
    archive, tampered = tmp_path / "runs.tar", tmp_path / "moved.tar"
    assert pack(root, archive) == 0
    other = json.loads((root / "results" / "runs" / ids[1] / "metrics.json").read_text())
    moved = json.dumps({**other, "run_id": ids[0]}).encode()  # run 1's result under run 0's name
    entries, listed = [], []
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.name != MANIFEST:
                data = tar.extractfile(member).read()
                data = moved if member.name == f"runs/{ids[0]}/metrics.json" else data
                data = (
                    (root / "results" / "runs" / ids[1] / "config.yaml").read_bytes()
                    if member.name == f"runs/{ids[0]}/config.yaml"
                    else data
                )
                entries.append((member.name, data, tarfile.REGTYPE))
                listed.append((member.name, data))
    err = unpack_error(capsys, crafted(tampered, entries, listed), tmp_path / "into")
    assert f"run {ids[0]}: its files belong to another run" in err
    assert not (tmp_path / "into").exists()


def test_unpack_refuses_a_link_a_training_run_and_a_bomb_before_writing(source, tmp_path, capsys, monkeypatch):
    import fcntl

    import shared.archive

    root, ids = source
    archive = tmp_path / "runs.tar"
    assert pack(root, archive) == 0
    into = tmp_path / "into"
    runs = into / "results" / "runs"
    runs.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (runs / ids[0]).symlink_to(elsewhere)
    assert "is a symbolic link" in unpack_error(capsys, archive, into)
    assert list(elsewhere.iterdir()) == []
    (runs / ids[0]).unlink()

    (runs / ids[1]).mkdir()
    (runs / ids[1] / "checkpoint.pt").write_bytes(b"a live run's")
    with open(runs / ids[1] / ".lock", "a+") as held:  # as the trainer holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert f"run {ids[1]} is being trained" in unpack_error(capsys, archive, into)
    assert sorted(p.name for p in (runs / ids[1]).iterdir()) == [".lock", "checkpoint.pt"]
    assert not (runs / ids[0]).exists()

    monkeypatch.setattr(shared.archive, "MAX_MEMBER_BYTES", 100)  # every archive's partition.csv is over it
    assert "over the limit of" in unpack_error(capsys, archive, tmp_path / "bombed")
    assert not (tmp_path / "bombed").exists()


def test_a_manifest_without_targets_is_one_line_before_anything_is_written(tmp_path, capsys):
    data = b"{}"
    archive = tmp_path / "no-targets.tar"
    manifest = {
        "format": "fedrepro-runs/1",
        "scale": "smoke",
        "members": [{"path": GOOD, "sha256": sha(data), "size": 2}],
    }
    with tarfile.open(archive, "w") as tar:
        for name, content in [(GOOD, data), (MANIFEST, json.dumps(manifest).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    assert "its manifest lacks targets" in unpack_error(capsys, archive, tmp_path / "into")
    assert not (tmp_path / "into").exists()


def test_a_recorded_failure_there_is_replaced_by_the_archives_run_and_kept_aside(source, tmp_path, capsys):
    root, ids = source
    archive = tmp_path / "runs.tar"
    assert pack(root, archive) == 0
    failed = tmp_path / "into" / "results" / "runs" / ids[0]
    failed.mkdir(parents=True)
    record = json.dumps({"status": "failed: RuntimeError: out of memory", "run_id": ids[0], "final_acc": None})
    (failed / "metrics.json").write_text(record)
    assert main(["unpack", str(archive), "--into", str(tmp_path / "into")]) == 0
    assert "unpacked 2 runs" in capsys.readouterr().out
    assert (failed / "metrics.json").read_bytes() == (root / "results" / "runs" / ids[0] / "metrics.json").read_bytes()
    (aside,) = failed.glob("metrics.json.replaced-*")
    assert aside.read_text() == record


def test_files_set_aside_within_one_second_keep_names_of_their_own(tmp_path):
    from shared.archive import commit

    run_dir = tmp_path / "0123456789abcdef"
    run_dir.mkdir()
    for attempt in ("first", "second"):  # two unpacks in the same second, each over a recorded failure
        (run_dir / "metrics.json").write_text(f'{{"status": "failed: {attempt}"}}')
        commit({f"runs/{run_dir.name}/metrics.json": f"{attempt} result".encode()}, tmp_path, [run_dir.name])
    kept = sorted(p.read_text() for p in run_dir.glob("metrics.json.replaced-*"))
    assert kept == ['{"status": "failed: first"}', '{"status": "failed: second"}']


def test_a_run_locked_by_another_writer_is_refused_naming_its_pid_and_the_lock_records_ours(tmp_path):
    import os
    from contextlib import ExitStack

    from shared.runs.files import hold_lock
    from shared.runs.locking import RunBusy, claim_runs

    (tmp_path / "a").mkdir()
    with hold_lock(tmp_path / "a" / ".lock"), ExitStack() as stack:  # as a trainer holds it
        with pytest.raises(RunBusy, match=f"held by pid {os.getpid()}"):
            claim_runs(tmp_path, ["a"], stack)
    with ExitStack() as stack:
        claim_runs(tmp_path, ["b"], stack)
        assert (tmp_path / "b" / ".lock").read_text() == str(os.getpid())


# --- a figure's probes travel with their runs ------------------------------------------------

FIG1 = "papers/fedcsd/fig1"  # Figure.probe: its drawing reads a probe job's CSV of Table I's FedAvg run


def probe_csv(rows: list[str]) -> bytes:
    from papers.fedcsd.exploratory import PROBE_COLUMNS

    return (",".join(PROBE_COLUMNS) + "\n" + "".join(f"{row}\n" for row in rows)).encode()


PROBE_ROWS = ["FedAvg,global,1,0.5,2.0,40.0,61.5", "Logit distillation,local,1,0.25,1.5,38.5,"]


def probed_project(root: Path) -> tuple[str, Path]:
    """A project holding fig1's run, finished as the trainer writes it, and its probe."""
    from shared.targets.figure_declarations import get_figure
    from shared.targets.probes import probe_code, probe_path

    figure = get_figure("fedcsd", "fig1")
    (cell,) = figure.cells("smoke")
    run_dir = root / "results" / "runs" / cell.run_id
    run_dir.mkdir(parents=True)
    for name, data in finished_files(cell.config).items():
        (run_dir / name).write_bytes(data)
    probe = probe_path(root / "results" / "runs", "fedcsd", "fig1", cell.run_id, probe_code(figure))
    probe.parent.mkdir(parents=True)
    probe.write_bytes(probe_csv(PROBE_ROWS))
    return cell.run_id, probe


def test_a_figures_probe_travels_with_its_run_and_the_workflow_does_not_compute_it_again(tmp_path, capsys):
    rid, probe = probed_project(tmp_path / "source")
    archive, project = tmp_path / "fig1.tar.gz", project_copy(tmp_path / "project")
    assert main(["pack", FIG1, "-o", str(archive), "--root", str(tmp_path / "source"), "--scale", "smoke"]) == 0
    assert "(figure probes: 1)" in capsys.readouterr().out
    assert f"probes/{probe.name}" in [m["path"] for m in read_manifest(archive)["members"]]
    assert main(["unpack", str(archive), "--into", str(project)]) == 0
    assert "figure probes: 1, into" in capsys.readouterr().out
    assert (project / "results" / "probes" / probe.name).read_bytes() == probe.read_bytes()
    proc = snakemake(project, "-n", "--config", "scale=smoke", "device=cpu", "--", FIG1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = job_counts(proc.stdout)
    assert "run" not in jobs and "probe" not in jobs and jobs["figure"] == 1, jobs


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda data: data.replace(b"epoch", b"round", 1), "does not have the columns"),
        (lambda data: data.replace(b",0.5,", b",1_0,", 1), "logit_distance is not a number"),
        (lambda data: data.replace(b",0.5,", b", 5,", 1), "logit_distance is not a number"),
        (lambda data: data.replace(b",0.5,", ",\u0663,".encode(), 1), "logit_distance is not a number"),
        (lambda data: data.replace(b"FedAvg", b"NA", 1), "variant is not short, printable text"),
        (lambda data: data.replace(b"FedAvg", b"1.5", 1), "variant is not short, printable text"),
        (lambda data: data.replace(b"FedAvg", b"Fed\x07vg", 1), "variant is not short, printable text"),
        (lambda data: data + b"1,2\n", "has 2 fields, not 7"),
        (lambda data: data[: data.index(b"\n") + 1], "holds no row"),
    ],
)
def test_a_probe_that_is_not_what_its_figure_writes_is_refused_before_anything_is_written(
    tmp_path, capsys, change, message
):
    rid, probe = probed_project(tmp_path / "source")
    archive = tmp_path / "fig1.tar"
    assert main(["pack", FIG1, "-o", str(archive), "--root", str(tmp_path / "source"), "--scale", "smoke"]) == 0
    tampered = tmp_path / "tampered.tar"

    def rewritten(name, data):  # the probe changed, the manifest's checksum and size with it
        if name == f"probes/{probe.name}":
            return change(data)
        if name == MANIFEST:
            manifest = json.loads(data)
            new = change(probe.read_bytes())
            for member in manifest["members"]:
                if member["path"] == f"probes/{probe.name}":
                    member.update(sha256=sha(new), size=len(new))
            return json.dumps(manifest).encode()
        return data

    rewrite(archive, tampered, rewritten)
    capsys.readouterr()
    assert main(["unpack", str(tampered), "--into", str(tmp_path / "into")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "into").exists()


def renamed(archive: Path, out: Path, old: str, new: str) -> None:
    """A copy of the archive with member `old` named `new`, in its manifest too."""
    with tarfile.open(archive) as src, tarfile.open(out, "w") as dst:
        for member in src:
            data = src.extractfile(member).read()
            data = data.replace(old.encode(), new.encode()) if member.name == MANIFEST else data
            member.name, member.size = new if member.name == old else member.name, len(data)
            dst.addfile(member, io.BytesIO(data))


def test_a_probe_of_no_probed_figure_or_of_a_run_not_held_is_refused(tmp_path, capsys):
    rid, probe = probed_project(tmp_path / "source")
    archive = tmp_path / "fig1.tar"
    assert main(["pack", FIG1, "-o", str(archive), "--root", str(tmp_path / "source"), "--scale", "smoke"]) == 0
    for name, message in (
        (f"probes/{probe.name.replace('-fig1-', '-fig3-')}", "which is no figure with a probe"),
        (f"probes/{probe.name.replace(rid, '0' * 16)}", "which does not come with it as completed"),
    ):
        renamed(archive, tmp_path / "renamed.tar", f"probes/{probe.name}", name)
        capsys.readouterr()
        assert main(["unpack", str(tmp_path / "renamed.tar"), "--into", str(tmp_path / "into")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
        assert not (tmp_path / "into").exists()


def test_pack_leaves_out_a_probe_older_than_its_run_or_not_what_its_figure_writes(tmp_path, capsys):
    """Either would pass at the destination for a current probe: a note names it instead."""
    import os

    rid, probe = probed_project(tmp_path / "source")
    metrics = tmp_path / "source" / "results" / "runs" / rid / "metrics.json"
    for name, spoil in (
        ("stale", lambda: os.utime(probe, (metrics.stat().st_mtime - 60,) * 2)),
        ("damaged", lambda: probe.write_bytes(probe_csv(["FedAvg,global,1,x,2.0,40.0,61.5"]))),
    ):
        spoil()
        archive = tmp_path / f"{name}.tar"
        assert main(["pack", FIG1, "-o", str(archive), "--root", str(tmp_path / "source"), "--scale", "smoke"]) == 0
        out, err = capsys.readouterr()
        assert "(figure probes: 0)" in out and f"note: {probe} " in err and "left out" in err, err
        assert not [m for m in read_manifest(archive)["members"] if m["path"].startswith("probes/")]


def test_a_probe_of_a_run_written_anew_replaces_one_there_and_one_of_the_same_run_stays(tmp_path, capsys):
    """A probe here whose run was not there (deleted, a recorded failure) was computed from
    another run: the archive's replaces it, set aside; beside the same run, one here stays."""
    rid, probe = probed_project(tmp_path / "source")
    archive, project = tmp_path / "fig1.tar", tmp_path / "project"
    assert main(["pack", FIG1, "-o", str(archive), "--root", str(tmp_path / "source"), "--scale", "smoke"]) == 0
    here = project / "results" / "probes" / probe.name
    here.parent.mkdir(parents=True)
    here.write_bytes(probe_csv(PROBE_ROWS[:1]))
    assert main(["unpack", str(archive), "--into", str(project)]) == 0
    assert here.read_bytes() == probe.read_bytes() and "was of the run replaced here" in capsys.readouterr().err
    (aside,) = here.parent.glob(f"{probe.name}.replaced-*")
    assert aside.read_bytes() == probe_csv(PROBE_ROWS[:1])
    here.write_bytes(probe_csv(PROBE_ROWS[:1]))  # the run there is now the archive's: a probe of it stays
    assert main(["unpack", str(archive), "--into", str(project)]) == 0
    assert here.read_bytes() == probe_csv(PROBE_ROWS[:1])
    # the same probe beside a run written anew: kept, and newer than its run (not computed again)
    import os
    import shutil

    here.write_bytes(probe.read_bytes())
    os.utime(here, (1, 1))
    shutil.rmtree(project / "results" / "runs" / rid)
    assert main(["unpack", str(archive), "--into", str(project)]) == 0
    assert here.read_bytes() == probe.read_bytes() and not list(here.parent.glob(f"{probe.name}.replaced-*-1"))
    assert here.stat().st_mtime >= (project / "results" / "runs" / rid / "metrics.json").stat().st_mtime


def test_a_probe_of_a_run_its_figure_does_not_draw_is_refused(tmp_path, capsys):
    from shared.targets.table_declarations import get_table

    rid, probe = probed_project(tmp_path / "source")
    other = next(c for c in expand(get_table("fedcsd", "table1"), "smoke") if c.run_id != rid)
    run_dir = tmp_path / "source" / "results" / "runs" / other.run_id
    run_dir.mkdir(parents=True)
    for name, data in finished_files(other.config).items():
        (run_dir / name).write_bytes(data)
    archive = tmp_path / "both.tar"
    source = str(tmp_path / "source")
    assert main(["pack", FIG1, "papers/fedcsd/table1", "-o", str(archive), "--root", source, "--scale", "smoke"]) == 0
    renamed(
        archive, tmp_path / "renamed.tar", f"probes/{probe.name}", f"probes/{probe.name.replace(rid, other.run_id)}"
    )
    capsys.readouterr()
    assert main(["unpack", str(tmp_path / "renamed.tar"), "--into", str(tmp_path / "into")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "which is none of fedcsd/fig1's runs at scale=smoke" in err, err
    assert not (tmp_path / "into").exists()


def test_a_probes_folder_or_file_taken_by_another_kind_of_file_is_refused_before_anything_is_written(tmp_path, capsys):
    rid, probe = probed_project(tmp_path / "source")
    archive = tmp_path / "fig1.tar"
    assert main(["pack", FIG1, "-o", str(archive), "--root", str(tmp_path / "source"), "--scale", "smoke"]) == 0
    for name, taken, message in (
        ("file", lambda p: p.write_text("x"), "is a link or not a folder"),
        ("link", lambda p: p.symlink_to(tmp_path), "is a link or not a folder"),
        ("folder", lambda p: (p / probe.name).mkdir(parents=True), "is a link or not a file"),
    ):
        project = tmp_path / name
        (project / "results").mkdir(parents=True)
        taken(project / "results" / "probes")
        capsys.readouterr()
        assert main(["unpack", str(archive), "--into", str(project)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
        assert not (project / "results" / "runs").exists()


def test_a_probes_code_is_its_modules_and_its_arguments_and_the_probe_job_holds_its_name_to_it(tmp_path, capsys):
    """Another row to distill with is another probe; the drawing's module is none of its code; a
    probe job asked to write under another code's name refuses in one line."""
    import dataclasses
    import functools

    from papers.fedcsd import tables
    from shared import probe_job
    from shared.targets.figure_declarations import get_figure
    from shared.targets.probes import probe_code

    figure = get_figure("fedcsd", "fig1")
    distill_otherwise = functools.partial(figure.probe.func, logit_distillation=tables.ABLATION[2])
    other = dataclasses.replace(figure, probe=distill_otherwise)
    assert probe_code(other) != probe_code(figure)
    assert "exploratory_drawing" in figure.draw_with.__module__  # a drawing change leaves the probe's code
    rid, probe = probed_project(tmp_path / "source")
    wrong = probe.with_name(probe.name.replace(probe_code(figure), "0" * 16))
    run = tmp_path / "source" / "results" / "runs" / rid
    assert probe_job.main([FIG1, "--run", str(run), "--out", str(wrong), "--scale", "smoke"]) == 2
    assert "named for probe code 0000000000000000" in capsys.readouterr().err and not wrong.exists()
