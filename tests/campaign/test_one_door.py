"""One door for runs from another machine (issue 39): a second set of crafted states and
archives, by class, against `campaign import` and `archive unpack`.

- headers: tar headers the standard library would parse at a cost far beyond their size
  (CVE-2024-6232), or that no writer of runs makes: refused in one line, nothing written;
- text: YAML anchors, aliases and tags, a JSON or YAML key twice;
- schema: a run the trainer cannot produce (a status where it does not write one, a loss not
  finite, a per-class list of the wrong length, a device that is a list, a partition.csv that
  is not the run's), a checkpoint that does not fit its model or is not finite;
- memory: a member larger than its run's model needs, refused before it is read, and a state
  of a pax header read within 2 GiB of address space.

Each case asserts its outcome: one line and nothing written, or the run alone left out and the
others imported with their genuine bytes.
"""

import gzip
import io
import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from shared.archive import main as archive_main
from shared.runs.files import MAX_CONFIG_BYTES, megabytes, sha256
from tests.campaign.carried_states import (
    checkpoint,
    finished_files,
    history,
    jsonl,
    model_state,
    progress_files,
)
from tests.campaign.test_campaign_trust import (
    FEDAVG,
    FEDPROX,
    OTHER,
    PROX,
    SHOT,
    crafted,
    edited_summary,
    err_lines,
    import_crafted,
    set_run,
    with_history,
    write_crafted,
)

pytestmark = pytest.mark.usefixtures("small_floor")

# --- raw tar headers -------------------------------------------------------------------------------


def header(name: bytes, size: int, kind: bytes = b"0", magic: bytes = b"ustar\x0000", size_field=None) -> bytes:
    """A 512-byte tar header as a writer would make it, its checksum right."""
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\x00"
    block[124:136] = size_field if size_field is not None else f"{size:011o}\x00".encode()
    block[136:148] = b"00000000000\x00"
    block[156:157] = kind
    block[257:265] = magic
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\x00 ".encode()
    return bytes(block)


def pax(records: bytes, declared: int | None = None, kind: bytes = b"x") -> bytes:
    size = len(records) if declared is None else declared
    return header(b"././@PaxHeader", size, kind) + records + bytes(-len(records) % 512)


def record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n"
    length = len(body) + 1
    length += len(str(length)) - 1
    return f"{length}{body}".encode()


def member(name: str, data: bytes) -> bytes:
    return header(name.encode(), len(data)) + data + bytes(-len(data) % 512)


def header_cases():
    """name -> (the crafted bytes for a member named `data`, what the refusal says, whether the
    stream is those bytes alone: a stream cut short ends there)."""
    yield "pax header claiming 1 GB", lambda data: pax(record("path", data), declared=10**9), "of 1000000000 bytes"
    yield "pax header of 8 kB", lambda data: pax(record("path", "a" * 8000)), "a pax header of 8"
    yield "pax comment", lambda data: pax(record("comment", "x")), "holds 'comment'"
    yield "pax key twice", lambda data: pax(record("path", data) + record("path", data)), "or twice"
    yield "pax record length wrong", lambda data: pax(b"99 path=x\n"), "records do not parse"
    yield "pax record without =", lambda data: pax(b"9 pathx\n"), "records do not parse"
    yield "pax size not a number", lambda data: pax(record("size", "1e3")), "size is not a number"
    yield "pax linkpath", lambda data: pax(record("linkpath", "/etc/passwd")), "holds 'linkpath'"
    yield "two pax headers", lambda data: pax(record("mtime", "1")) * 2, "two pax headers"
    yield "pax header at the end", lambda data: pax(record("mtime", "1")) + bytes(1024), "ends after a pax header"
    yield "global pax header", lambda data: pax(record("path", "x"), kind=b"g"), "a global pax header"
    yield "GNU long name", lambda data: pax(b"a" * 300, kind=b"L"), "a GNU long name"
    yield "GNU long link", lambda data: pax(b"a" * 300, kind=b"K"), "a GNU long link name"
    yield "base-256 size", lambda data: header(data.encode(), 0, size_field=b"\x80" + bytes(11)), "not an octal"
    yield (
        "checksum wrong",
        lambda data: header(data.encode(), 0)[:148] + b"0" * 8 + header(data.encode(), 0)[156:],
        "checksum",
    )
    yield "old v7 header", lambda data: header(data.encode(), 0, magic=bytes(8)), "not ustar"
    yield "name not UTF-8", lambda data: header(data.encode() + b"\xff", 0), "not UTF-8"
    yield "cut short in a member", lambda data: header(data.encode(), 4096) + b"x" * 100, "cut short"


HEADERS = {name: (craft, fragment) for name, craft, fragment in header_cases()}


def genuine_tar(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


def headed_state(genuine, tmp_path: Path, raw: bytes, alone: bool = False) -> Path:
    """The genuine state's tar with the crafted bytes in front (or those alone), gzip-compressed."""
    plain = b"" if alone else genuine_tar(write_crafted(crafted(genuine), tmp_path / "genuine.tar.gz"))
    out = tmp_path / "state.tar.gz"
    out.write_bytes(gzip.compress(raw + plain, compresslevel=1))
    return out


def archive_of(
    tmp_path: Path, files: dict[str, dict[str, bytes]], raw: bytes = b"", forge=lambda manifest: manifest, alone=False
) -> Path:
    """An archive as `pack` writes it (fedrepro-runs/1) of these runs' files, crafted bytes first."""
    members = [(f"runs/{rid}/{name}", data) for rid, run in files.items() for name, data in run.items()]
    manifest = {
        "format": "fedrepro-runs/1",
        "targets": ["papers/fedcad/table4"],
        "scale": "smoke",
        "members": [{"path": n, "sha256": sha256(d), "size": len(d)} for n, d in members],
    }
    body = b"".join(member(n, d) for n, d in members)
    body += member("manifest.json", forge(json.dumps(manifest).encode()))
    out = tmp_path / "runs.tar"
    out.write_bytes(raw if alone else raw + body + bytes(1024))
    return out


def refused(capsys, code: int, fragment: str, root: Path) -> None:
    err = err_lines(capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err
    assert not (root / "results").exists()


@pytest.mark.parametrize("case", HEADERS)
def test_import_refuses_a_header_before_the_standard_library_parses_it(genuine, tmp_path, capsys, case):
    craft, fragment = HEADERS[case]
    raw = craft(f"finished/{SHOT}/partition.csv")
    path, root = headed_state(genuine, tmp_path, raw, alone="cut short" in case), tmp_path / "project"
    refused(capsys, main_import(path, root), fragment, root)


@pytest.mark.parametrize("case", HEADERS)
def test_unpack_refuses_a_header_before_the_standard_library_parses_it(tmp_path, capsys, case):
    craft, fragment = HEADERS[case]
    raw = craft(f"runs/{SHOT}/partition.csv")
    archive = archive_of(tmp_path, {SHOT: finished_files(FEDAVG[0])}, raw, alone="cut short" in case)
    root = tmp_path / "project"
    refused(capsys, archive_main(["unpack", str(archive), "--into", str(root)]), fragment, root)


def main_import(path: Path, root: Path) -> int:
    from shared.campaign.cli import main

    root.mkdir(exist_ok=True)
    return main(["import", str(path), "--root", str(root)])


def test_a_genuine_archive_unpacks_with_its_bytes(tmp_path, capsys):
    files = {SHOT: finished_files(FEDAVG[0]), OTHER: finished_files(FEDAVG[1])}
    root = tmp_path / "project"
    assert archive_main(["unpack", str(archive_of(tmp_path, files)), "--into", str(root)]) == 0, capsys.readouterr()
    for rid, run in files.items():
        written = (root / "results" / "runs" / rid).iterdir()
        assert {p.name: p.read_bytes() for p in written if not p.name.startswith(".")} == run


def test_a_long_name_in_a_small_pax_header_is_genuine(genuine, tmp_path, monkeypatch, capsys):
    """tarfile's PAX writer gives a name over 100 characters a pax header: read, and the file shipped as it was."""
    state = crafted(genuine)
    name = f"client_state/{'m' * 64}-0-r1.pt"
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer)
    files = {**progress_files(FEDPROX), name: buffer.getvalue()}
    set_run(state, "progress", PROX, files)
    code, root, _ = import_crafted(state, tmp_path, monkeypatch)
    assert code == 0, err_lines(capsys)
    assert (root / "results" / "runs" / PROX / name).read_bytes() == buffer.getvalue()


# --- text: anchors, aliases, tags, keys twice ----------------------------------------------------------

ALIAS_BOMB = b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n".encode() for i in range(8)
)


def with_config(files: dict[str, bytes], config: bytes) -> dict[str, bytes]:
    return {**files, "config.yaml": config}


def twice(text: bytes, key: bytes, value: bytes) -> bytes:
    """JSON text with `key` written once more, first, where a person reads it."""
    return text.replace(b"{", b"{" + b'"' + key + b'": ' + value + b", ", 1)


def text_forgeries():
    files = finished_files(FEDAVG[0])
    config = files["config.yaml"]
    yield "config alias bomb", with_config(files, config + ALIAS_BOMB)
    yield "config anchor", with_config(files, config.replace(b"seed: 0", b"seed: &s 0"))
    yield "config python tag", with_config(files, config + b"x: !!python/object/apply:os.system ['true']\n")
    yield "config str tag", with_config(files, config.replace(b"seed: 0", b"seed: !!int 0"))
    yield "config key twice", with_config(files, config.replace(b"seed: 0", b"seed: 1\nseed: 0"))
    yield "metrics.json key twice", {**files, "metrics.json": twice(files["metrics.json"], b"final_acc", b"99.0")}
    rows = files["metrics.jsonl"].splitlines(keepends=True)
    forged_rows = twice(rows[0], b"train_loss", b"0.1") + b"".join(rows[1:])
    yield "metrics.jsonl key twice", {**files, "metrics.jsonl": forged_rows}


TEXT = dict(text_forgeries())


@pytest.mark.parametrize("case", TEXT)
def test_import_leaves_out_a_run_of_yaml_aliases_tags_or_keys_twice(genuine, tmp_path, monkeypatch, capsys, case):
    assert_left_out(genuine, tmp_path, monkeypatch, capsys, "finished", SHOT, TEXT[case])


def test_import_refuses_a_manifest_with_a_key_twice(genuine, tmp_path, monkeypatch, capsys):
    state = crafted(genuine)
    write_crafted(state, tmp_path / "probe.tar.gz")  # lists the members
    state.relist = False
    state.manifest_bytes = twice(json.dumps(state.manifest).encode(), b"scale", b'"paper"')
    code, root, _ = import_crafted(state, tmp_path, monkeypatch)
    refused(capsys, code, "is not JSON", root)


@pytest.mark.parametrize("case", ["config alias bomb", "config python tag", "metrics.json key twice"])
def test_unpack_refuses_a_run_of_yaml_aliases_tags_or_keys_twice(tmp_path, capsys, case):
    archive, root = archive_of(tmp_path, {SHOT: TEXT[case]}), tmp_path / "project"
    refused(capsys, archive_main(["unpack", str(archive), "--into", str(root)]), f"run {SHOT}", root)


def test_unpack_refuses_a_manifest_with_a_key_twice(tmp_path, capsys):
    archive = archive_of(
        tmp_path, {SHOT: finished_files(FEDAVG[0])}, forge=lambda manifest: twice(manifest, b"format", b'"other"')
    )
    root = tmp_path / "project"
    refused(capsys, archive_main(["unpack", str(archive), "--into", str(root)]), "is not JSON", root)


def assert_left_out(genuine, tmp_path, monkeypatch, capsys, kind, rid, files) -> None:
    """The run alone left out in one line; the others imported with their genuine bytes."""
    state = crafted(genuine)
    set_run(state, kind, rid, files)
    code, root, outside = import_crafted(state, tmp_path, monkeypatch)
    err = [line for line in err_lines(capsys) if not line.startswith("note: ")]
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: run {rid} ({kind}) is left out"), err
    assert err[0].isprintable()
    shipped, runs = root / "results" / "shipped" / "runs", root / "results" / "runs"
    assert not (shipped / rid).exists() and not (runs / rid / "checkpoint.pt").exists()
    for other in {SHOT, OTHER} - {rid}:
        expected = {name: data for name, data in genuine[1].items() if name.startswith(f"finished/{other}/")}
        written = {f"finished/{other}/{p.name}": p.read_bytes() for p in (shipped / other).iterdir()}
        assert {name: data for name, data in written.items() if "/." not in name} == expected  # its lock aside
    if rid != PROX:
        assert (runs / PROX / "checkpoint.pt").read_bytes() == genuine[1][f"progress/{PROX}/checkpoint.pt"]
    assert list(outside.iterdir()) == []


# --- schema: runs the trainer cannot produce ----------------------------------------------------------


def agreeing(records, status="completed", **extra) -> dict[str, bytes]:
    """A finished run of SHOT whose summary is what `summarize` makes of these records."""
    files = with_history(FEDAVG[0], records, status)
    return edited_summary(files, **extra) if extra else files


def finished_schema_forgeries():
    cfg = FEDAVG[0]
    records, files = history(cfg, cfg.federation.rounds), finished_files(cfg)
    classes = len(records[0]["per_class_acc"])

    def last(**changes):
        return [*records[:-1], {**records[-1], **changes}]

    yield "suspect after 1 of 4 rounds", agreeing(records[:1], "suspect: final accuracy 25.00% is chance (10.00%)")
    yield "diverged with every loss finite", agreeing(records, "diverged: global model loss is nan after round 4")
    yield "completed with a NaN loss", agreeing(last(global_loss=math.nan))
    yield "completed with a NaN training loss", agreeing(last(train_loss=math.nan))
    yield "a NaN loss before the last round", agreeing([{**records[0], "global_loss": math.nan}, *records[1:]])
    yield "suspect that judge does not find", agreeing(records, "suspect: training loss rose from 2 to 90")
    yield "completed that judge finds suspect", agreeing(last(train_loss=500.0))
    yield "accuracy outside its per-class", agreeing(last(global_acc=90.0))
    yield "per-class of the wrong length", agreeing(last(per_class_acc=[40.0] * (classes + 1)))
    yield "per-class of text", agreeing(last(per_class_acc=["40"] * classes))
    yield "clients not numbers", agreeing(last(clients=["0", "1"]))
    local = records[-1]["local_accs"]  # a run that does not record them (eval.local=true)
    yield "local per-class not recorded by the run", agreeing(last(local_per_class_acc=[[v] * classes for v in local]))
    yield "seconds infinite", agreeing(last(seconds=math.inf))
    yield "device a list", edited_summary(files, device=["cuda:0"])
    yield "device name of control characters", edited_summary(files, device_name="\x1b[2K\rok")
    yield "client samples strings", edited_summary(files, client_samples=["5"] * cfg.partition.clients)
    yield "num_parameters text", edited_summary(files, num_parameters="many")
    yield "wall time NaN", edited_summary(files, wall_time_s=math.nan)
    yield "wall time text", edited_summary(files, wall_time_s="12")
    yield "eval rounds twice", edited_summary(files, eval_rounds=[1, 1, 2, 3])
    yield "eval rounds past the config", edited_summary(files, eval_rounds=[1, 2, 3, 9])
    yield "rounds to target forged", edited_summary(files, rounds_to_target={"30": 1})
    yield "domain accuracy text", edited_summary(files, domain_acc="all")
    yield "runtime a list", edited_summary(files, runtime=[1])
    yield "status of control characters", agreeing(records, "completed\x1b[2K")
    yield "partition of another run", {**files, "partition.csv": b"client,0\n0,5\n"}
    yield "partition of text", {**files, "partition.csv": files["partition.csv"].replace(b"\n0,5", b"\n0,five", 1)}
    misnumbered = files["partition.csv"].replace(b"\n0,", b"\n7,", 1)
    yield "partition clients misnumbered", {**files, "partition.csv": misnumbered}
    yield "partition missing", {k: v for k, v in files.items() if k != "partition.csv"}
    samples = [5 * classes] * cfg.partition.clients
    yield "partition counting other samples", edited_summary(files, client_samples=[n + 1 for n in samples])


def progress_schema_forgeries():
    files, records = progress_files(FEDPROX), history(FEDPROX, 1)

    def with_state(changes: dict) -> dict[str, bytes]:
        buffer = io.BytesIO()
        state = {"identity": None, "history": records, "global": model_state(FEDPROX), "method": {}, "elapsed": 3.0}
        state.update(identity=torch.load(io.BytesIO(files["checkpoint.pt"]), weights_only=True)["identity"])
        state.update(changes)
        torch.save(state, buffer)
        return {**files, "checkpoint.pt": buffer.getvalue()}

    weights = model_state(FEDPROX)
    first = next(iter(weights))
    yield (
        "checkpoint of NaN weights",
        with_state({"global": {**weights, first: torch.full_like(weights[first], math.nan)}}),
    )
    yield "checkpoint of the wrong shapes", with_state({"global": {**weights, first: torch.zeros(3)}})
    yield "checkpoint lacking a tensor", with_state({"global": {k: v for k, v in weights.items() if k != first}})
    yield "checkpoint of another model", with_state({"global": {"w": torch.zeros(3)}})
    yield "method state infinite", with_state({"method": {"control": torch.full((3,), math.inf)}})
    yield "pickled per-client file", {**files, "client_state/m-0-r0.pt": pickle.dumps(Path("/tmp"))}
    nan = io.BytesIO()
    torch.save({"w": torch.full((2,), math.nan)}, nan)
    yield "per-client file of NaN", {**files, "client_state/m-0-r0.pt": nan.getvalue()}
    yield (
        "history of a NaN training loss",
        {
            **files,
            "metrics.jsonl": jsonl([{**records[0], "train_loss": math.nan}]),
            "checkpoint.pt": checkpoint(FEDPROX, [{**records[0], "train_loss": math.nan}]),
        },
    )
    yield "partition of another run", {**files, "partition.csv": b"client,0\n0,5\n"}


SCHEMA = {
    **{f"finished: {name}": ("finished", SHOT, files) for name, files in finished_schema_forgeries()},
    **{f"progress: {name}": ("progress", PROX, files) for name, files in progress_schema_forgeries()},
}


@pytest.mark.parametrize("case", SCHEMA)
def test_import_leaves_out_a_run_the_trainer_cannot_produce(genuine, tmp_path, monkeypatch, capsys, case):
    kind, rid, files = SCHEMA[case]
    assert_left_out(genuine, tmp_path, monkeypatch, capsys, kind, rid, files)


@pytest.mark.parametrize(
    "case", ["finished: suspect after 1 of 4 rounds", "finished: completed with a NaN loss", "finished: device a list"]
)
def test_unpack_refuses_a_run_the_trainer_cannot_produce(tmp_path, capsys, case):
    archive, root = archive_of(tmp_path, {SHOT: SCHEMA[case][2]}), tmp_path / "project"
    refused(capsys, archive_main(["unpack", str(archive), "--into", str(root)]), f"run {SHOT}", root)


# --- memory and time: bounded by the input ---------------------------------------------------------------

BOUNDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
sys.argv = sys.argv[1:]
from {module} import main
sys.exit(main())
"""


@pytest.mark.parametrize("command", ["import", "unpack"])
def test_a_small_file_of_one_huge_pax_header_is_refused_within_2_gib(tmp_path, command):
    """CVE-2024-6232's shape: 1.5 kB whose pax header claims 18 GB; Python 3.11.7's tarfile reads it whole."""
    raw = pax(record("path", f"finished/{SHOT}/" + "p" * 900), declared=18 * 10**9)
    path = tmp_path / "state.tar"
    path.write_bytes(raw)
    module, argv = (
        ("shared.campaign.cli", ["import", str(path), "--root", str(tmp_path / "root")])
        if command == "import"
        else ("shared.archive", ["unpack", str(path), "--into", str(tmp_path / "root")])
    )
    done = subprocess.run(
        [sys.executable, "-c", BOUNDED.format(module=module), "x", *argv], capture_output=True, text=True, timeout=120
    )
    assert len(raw) < 2000 and done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "a pax header of 18000000000 bytes" in done.stderr
    assert not (tmp_path / "root" / "results").exists()


def progress_members(files: dict[str, bytes], last: bytes) -> bytes:
    """A progress run's config, partition and history as `write_state` orders them, then `last`."""
    names = ("config.yaml", "partition.csv", "metrics.jsonl")
    return b"".join(member(f"progress/{PROX}/{name}", files[name]) for name in names) + last


def oversized_cases():
    files = progress_files(FEDPROX)
    claim = 2 * 2**30 - 1
    yield "checkpoint claiming 2 GiB", progress_members(files, header(f"progress/{PROX}/checkpoint.pt".encode(), claim))
    client = f"progress/{PROX}/client_state/m-0-r0.pt".encode()
    yield "per-client file claiming 1 GiB", progress_members(files, header(client, 2**30))
    yield "checkpoint of 20 MB", progress_members(files, member(f"progress/{PROX}/checkpoint.pt", bytes(20 * 10**6)))
    big = files["config.yaml"] + b"#" * 2**20
    yield "config.yaml over 1 MiB", member(f"progress/{PROX}/config.yaml", big)
    name = f"progress/{PROX}/client_state/{'m' * 300}-0-r0.pt"
    yield "a 300-letter file name", pax(record("path", name)) + header(b"x", 0)


OVERSIZED = dict(oversized_cases())


@pytest.mark.parametrize("case", OVERSIZED)
def test_import_refuses_a_member_its_run_does_not_need_before_reading_it(tmp_path, capsys, case):
    """A member over what its run's model (or kind) needs is refused at its header: a local
    checkpoint stays where it is."""
    root = tmp_path / "project"
    local = root / "results" / "runs" / PROX / "checkpoint.pt"
    local.parent.mkdir(parents=True)
    local.write_bytes(b"local")
    path = tmp_path / "state.tar"
    path.write_bytes(OVERSIZED[case] + bytes(1024))
    code = main_import(path, root)
    err = err_lines(capsys)
    assert code == 2 and len(err) == 1, err
    assert "over the limit of" in err[0] or "is not a campaign state's file" in err[0], err
    assert [p.name for p in local.parent.iterdir()] == ["checkpoint.pt"] and local.read_bytes() == b"local"


def test_unpack_refuses_a_config_over_its_limit_before_reading_it(tmp_path, capsys):
    files = finished_files(FEDAVG[0])
    archive = archive_of(tmp_path, {SHOT: {**files, "config.yaml": files["config.yaml"] + b"#" * MAX_CONFIG_BYTES}})
    root = tmp_path / "project"
    code = archive_main(["unpack", str(archive), "--into", str(root)])
    refused(capsys, code, f"over the limit of {megabytes(MAX_CONFIG_BYTES)}", root)


# --- writes a kill leaves, shipped runs the reporting cannot read, text shown escaped -------------------


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_the_next_import_removes_a_killed_imports_temporaries_and_no_live_ones(genuine, tmp_path, monkeypatch, capsys):
    shipped = tmp_path / "project" / "results" / "shipped"
    (shipped / "runs" / SHOT).mkdir(parents=True)
    dead = [shipped / f".README.md.{dead_pid()}.tmp", shipped / "runs" / SHOT / f".metrics.json.{dead_pid()}.tmp"]
    with subprocess.Popen(["sleep", "60"]) as live:
        alive = shipped / f".README.md.{live.pid}.tmp"
        for path in [*dead, alive]:
            path.write_text("half")
        code, root, _ = import_crafted(crafted(genuine), tmp_path, monkeypatch)
        live.kill()
    assert code == 0, err_lines(capsys)
    assert not any(path.exists() for path in dead) and alive.read_text() == "half"


def test_a_folder_build_removes_a_killed_builds_folder_and_never_a_live_ones(tmp_path):
    from shared.runs.files import write_folder_atomically

    dead = tmp_path / f".table4.{dead_pid()}.tmp"
    with subprocess.Popen(["sleep", "60"]) as live:
        alive = tmp_path / f".table4.{live.pid}.tmp"
        for folder in (dead, alive):
            folder.mkdir()
            (folder / "half.md").write_text("half")
        write_folder_atomically(tmp_path / "table4", lambda out: (out.mkdir(), (out / "t.md").write_text("t")))
        live.kill()
    assert not dead.exists() and (alive / "half.md").read_text() == "half"
    assert (tmp_path / "table4" / "t.md").read_text() == "t"


def test_unpack_removes_a_killed_unpacks_temporaries(tmp_path, capsys):
    root = tmp_path / "project"
    leftover = root / "results" / "runs" / SHOT / f".metrics.json.{dead_pid()}.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("half")
    archive = archive_of(tmp_path, {SHOT: finished_files(FEDAVG[0])})
    assert archive_main(["unpack", str(archive), "--into", str(root)]) == 0, capsys.readouterr().err
    assert not leftover.exists()


def ship_broken(root: Path) -> None:
    """A shipped run whose device is a list: shipped by hand, or by a version that did not check."""
    run = root / "results" / "shipped" / "runs" / OTHER
    run.mkdir(parents=True)
    files = edited_summary(finished_files(FEDAVG[1]), device=["cuda:0"], client_samples=["5"])
    for name, data in files.items():
        (run / name).write_bytes(data)


def test_a_shipped_run_that_cannot_be_read_is_named_and_the_import_goes_on(genuine, tmp_path, monkeypatch, capsys):
    ship_broken(tmp_path / "project")
    state = crafted(genuine)
    state.members = [m for m in state.members if not m[0].startswith(f"finished/{OTHER}/")]
    code, root, _ = import_crafted(state, tmp_path, monkeypatch)
    err = err_lines(capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: shipped run {OTHER} cannot be read"), err
    assert f"git rm -r {root / 'results' / 'shipped' / 'runs' / OTHER}" in err[0]
    assert (root / "results" / "shipped" / "runs" / SHOT / "metrics.json").is_file()
    assert (root / "results" / "runs" / PROX / "checkpoint.pt").is_file()


def test_status_names_a_shipped_run_that_cannot_be_read_and_counts_the_rest(tmp_path, capsys):
    from shared.campaign.cli import main

    root = tmp_path / "project"
    ship_broken(root)
    assert main(["status", "papers/fedcad/table4", "--scale", "smoke", "--root", str(root)]) == 0
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith(f"error: shipped run {OTHER} cannot be read"), err
    assert "papers/fedcad/table4: " in out and "total: " in out


def test_a_folder_of_an_undeclared_table_stops_no_import(genuine, tmp_path, monkeypatch, capsys):
    leftover = tmp_path / "project" / "results" / "shipped" / "tables" / "smoke" / "fedcad" / "table99"
    leftover.mkdir(parents=True)
    code, root, _ = import_crafted(crafted(genuine), tmp_path, monkeypatch)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "is no declared table or figure" in captured.out and leftover.is_dir()


@pytest.mark.parametrize("command", ["import", "unpack"])
def test_control_characters_from_another_machine_are_shown_escaped(tmp_path, capsys, command):
    path = tmp_path / "state\x1b[2K\r.tar"
    path.write_bytes(member("\x1b]0;owned\x07", b"") + bytes(1024))
    root = tmp_path / "project"
    code = main_import(path, root) if command == "import" else archive_main(["unpack", str(path), "--into", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err[:-1].isprintable() and "\\x1b" in err, repr(err)
