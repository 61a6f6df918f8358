"""A review of the one reader (shared/runs/transfer.py) with attacks the other files of the
one door do not make: a pax size of a non-ASCII digit, a member named as a checkpoint at the
top level, a gzip stream damaged or extended after the tar's end, a header limit recomputed
from the run's config at every header, the file and its parts side by side (a time in the
future, control characters, the import's own input renamed or removed), and where a large
checkpoint is staged. Each case asserts the correct outcome (the defects it found, once marked
xfail (strict), are fixed). The attacks that hold are kept where they add cases the other files lack."""

import gzip
import hashlib
import io
import json

import pytest

from shared.archive import main as archive_main
from shared.campaign import ship, state_reading
from shared.campaign.state import read_state
from shared.runs import transfer
from tests.campaign.carried_states import finished_files, progress_files
from tests.campaign.test_campaign_trust import (
    FEDAVG,
    FEDPROX,
    PROX,
    SHOT,
    crafted,
    err_lines,
    write_crafted,
)
from tests.campaign.test_one_door import archive_of, header, main_import, member, refused


@pytest.fixture(autouse=True)
def no_tables(monkeypatch):
    """Each case is about what is read and written, not the tables built from it."""
    monkeypatch.setattr(ship, "build_shipped_table", lambda *a: None)
    monkeypatch.setattr(ship, "build_shipped_figure", lambda *a: None)


def pax_record(key: str, value: str) -> bytes:
    """A pax record whose length counts bytes, as pax says (a non-ASCII value is longer in bytes)."""
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def pax_header(records: bytes) -> bytes:
    return header(b"././@PaxHeader", len(records), b"x") + records + bytes(-len(records) % 512)


# --- headers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["import", "unpack"])
def test_a_pax_size_of_a_superscript_digit_is_refused_in_one_line(tmp_path, capsys, command):
    """A pax header whose size is '²' (isdigit() but no int): refused in one line, exit 2, nothing written."""
    name = f"finished/{SHOT}/partition.csv" if command == "import" else f"runs/{SHOT}/partition.csv"
    path = tmp_path / "file.tar"
    path.write_bytes(pax_header(pax_record("size", "\u00b2")) + header(name.encode(), 0) + bytes(1024))
    root = tmp_path / "project"
    code = main_import(path, root) if command == "import" else archive_main(["unpack", str(path), "--into", str(root)])
    refused(capsys, code, "pax header", root)


def test_a_checkpoint_member_at_the_top_level_is_refused_in_one_line(tmp_path, capsys):
    """A member named `checkpoint.pt` (no run's folder): refused in one line as no state's file, not a ValueError."""
    path = tmp_path / "state.tar"
    path.write_bytes(member("checkpoint.pt", b"x") + bytes(1024))
    root = tmp_path / "project"
    refused(capsys, main_import(path, root), "is not a campaign state's file", root)


# --- the stream after the tar's end ----------------------------------------------------------------


def stream_damages():
    """name -> what turns a genuine .tar.gz's bytes into a damaged or extended one."""
    extra = gzip.compress(member(f"finished/{'0' * 16}/metrics.json", b"{}") + bytes(1024))
    yield "gzip CRC-32 wrong", lambda raw: raw[:-8] + bytes([raw[-8] ^ 0xFF]) + raw[-7:]
    yield "gzip trailer missing (last part lost)", lambda raw: raw[:-8]
    yield "garbage after the gzip stream", lambda raw: raw + b"garbage!" * 16
    yield "a second gzip member holding a tar member", lambda raw: raw + extra
    yield "an empty gzip member, its header's comment any bytes", lambda raw: raw + empty_member_with_comment()
    yield (
        "a member after the tar's end",
        lambda raw: gzip.compress(gzip.decompress(raw) + member(f"finished/{'0' * 16}/metrics.json", b"{}")),
    )


def empty_member_with_comment() -> bytes:
    """A gzip member of no data whose header carries a comment (FCOMMENT): gzip's reader skips it."""
    empty = gzip.compress(b"", mtime=0)
    return empty[:3] + bytes([empty[3] | 0x10]) + empty[4:10] + b"hidden bytes\x00" + empty[10:]


STREAM_DAMAGES = dict(stream_damages())


@pytest.mark.parametrize("case", STREAM_DAMAGES)
def test_a_stream_damaged_or_extended_after_the_tar_end_is_refused(genuine, tmp_path, capsys, case):
    """Bytes after the tar's end (a wrong gzip CRC, a lost trailer, garbage, hidden members):
    refused in one line, nothing written."""
    path = write_crafted(crafted(genuine), tmp_path / "state.tar.gz")
    path.write_bytes(STREAM_DAMAGES[case](path.read_bytes()))
    root = tmp_path / "project"
    code = main_import(path, root)
    err = err_lines(capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert not (root / "results").exists()


def test_a_part_set_with_a_gap_is_refused_in_one_line(genuine, tmp_path, capsys):
    """part-00 and part-02 of a state, part-01 lost: refused in one line, the parts left as they were."""
    raw = write_crafted(crafted(genuine), tmp_path / "whole.tar.gz").read_bytes()
    third = len(raw) // 3
    path = tmp_path / "state.tar.gz"
    (tmp_path / "state.tar.gz.part-00").write_bytes(raw[:third])
    (tmp_path / "state.tar.gz.part-02").write_bytes(raw[2 * third :])
    root = tmp_path / "project"
    refused(capsys, main_import(path, root), "error: ", root)
    left = sorted(p.name for p in tmp_path.iterdir() if p != root)
    assert left == ["state.tar.gz.part-00", "state.tar.gz.part-02", "whole.tar.gz"]


def test_parts_numbered_with_a_gap_are_refused_even_where_their_bytes_join(genuine, tmp_path, capsys):
    """part-00, part-01 and part-07 that together are the whole state: refused in one line (a
    part between them was lost or one was renamed), the parts left as they were."""
    raw = write_crafted(crafted(genuine), tmp_path / "whole.tar.gz").read_bytes()
    third = len(raw) // 3
    for number, piece in zip(("00", "01", "07"), (raw[:third], raw[third : 2 * third], raw[2 * third :])):
        (tmp_path / f"state.tar.gz.part-{number}").write_bytes(piece)
    root = tmp_path / "project"
    refused(capsys, main_import(tmp_path / "state.tar.gz", root), "numbered 00, 01, 07", root)
    assert len(list(tmp_path.glob("state.tar.gz.part-*"))) == 3


# --- time: bounded by the input --------------------------------------------------------------------


def test_header_limits_cost_no_more_than_the_input(tmp_path, monkeypatch):
    """A config.yaml of 256 kB then 30 empty per-client headers (a few kB gzipped):
    the YAML parsed stays within the stream's size, not 30 times it."""
    files = progress_files(FEDPROX)
    config = files["config.yaml"] + b"#" + b"x" * (2**18) + b"\n"
    assert state_reading.run_config(config) is not None  # a valid config: each header's limit builds on it
    body = member(f"progress/{PROX}/config.yaml", config)
    body += member(f"progress/{PROX}/partition.csv", files["partition.csv"])
    body += member(f"progress/{PROX}/metrics.jsonl", files["metrics.jsonl"])
    body += b"".join(header(f"progress/{PROX}/client_state/m-0-r{i}.pt".encode(), 0) for i in range(30))
    body += member("manifest.json", b"{}") + bytes(1024)
    path = tmp_path / "state.tar.gz"
    path.write_bytes(gzip.compress(body))
    parsed = []
    real = state_reading.strict_yaml
    monkeypatch.setattr(state_reading, "strict_yaml", lambda data: (parsed.append(len(data)), real(data))[1])
    with pytest.raises(transfer.TransferError):  # its manifest is none: refused once every header is read
        transfer.read_transfer(path, state_reading.CAMPAIGN)
    assert sum(parsed) <= 3 * len(body), f"{sum(parsed)} bytes of YAML parsed for a stream of {len(body)}"


# --- the file and its parts side by side -----------------------------------------------------------


def with_written_at(genuine, when: str):
    state = crafted(genuine)
    state.manifest["written_at"] = when
    return state


def test_a_state_written_in_the_future_does_not_win_over_a_genuine_one(genuine, tmp_path):
    """Parts claiming written_at 9999-12-31 beside a genuine whole state: the genuine one is read and stays in place."""
    write_crafted(with_written_at(genuine, "9999-12-31T23:59:59+00:00"), tmp_path / "state.tar.gz.part-00")
    path = write_crafted(crafted(genuine), tmp_path / "state.tar.gz")
    manifest, _ = read_state(path)
    assert manifest["written_at"] == genuine[0]["written_at"] and path.is_file()


def test_the_note_on_two_forms_shows_no_control_characters(genuine, tmp_path, capsys):
    """A written_at of an ESC where the T goes (fromisoformat takes it): the note on stderr is printable, one line."""
    write_crafted(with_written_at(genuine, "2025-06-01\x1b00:00:00+00:00"), tmp_path / "state.tar.gz.part-00")
    path = write_crafted(with_written_at(genuine, "2020-01-01T00:00:00+00:00"), tmp_path / "state.tar.gz")
    read_state(path)
    err = capsys.readouterr().err
    assert all(line.isprintable() for line in err.splitlines()), repr(err)


@pytest.mark.parametrize("older", ["none: the same state", "the parts", "the whole file"])
def test_import_removes_and_renames_nothing_beside_the_file_it_reads(genuine, tmp_path, capsys, older):
    """`import FILE` with FILE.part-00 beside it (the same state, or an older one): FILE and its
    parts left as they were."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    old = with_written_at(genuine, "2020-01-01T00:00:00+00:00")
    write_crafted(old if older == "the parts" else crafted(genuine), inbox / "p")
    (inbox / "p").rename(inbox / "state.tar.gz.part-00")
    path = write_crafted(old if older == "the whole file" else crafted(genuine), inbox / "state.tar.gz")
    if older == "none: the same state":
        path.write_bytes((inbox / "state.tar.gz.part-00").read_bytes())
    before = {p.name: p.read_bytes() for p in inbox.iterdir()}
    main_import(path, tmp_path / "project")
    capsys.readouterr()
    assert {p.name: p.read_bytes() for p in inbox.iterdir()} == before


# --- where a large checkpoint is staged ------------------------------------------------------------


def test_import_stages_a_large_checkpoint_under_the_projects_results(genuine, tmp_path, monkeypatch, capsys):
    """A checkpoint over IN_MEMORY_BYTES (here 1 byte) read by `import` is staged under --root's
    results/, never beside FILE."""
    monkeypatch.setattr(transfer, "IN_MEMORY_BYTES", 1)
    folders, stage = [], transfer.Staging.stage

    def recording(self, chunks, size):
        staged = stage(self, chunks, size)
        folders.append(staged.path.parent)
        return staged

    monkeypatch.setattr(transfer.Staging, "stage", recording)
    inbox, root = tmp_path / "inbox", tmp_path / "project"
    inbox.mkdir()
    path = write_crafted(crafted(genuine), inbox / "state.tar.gz")
    assert main_import(path, root) == 0, err_lines(capsys)
    assert folders and all(folder.is_relative_to(root / "results") for folder in folders), folders


# --- attacks that hold ------------------------------------------------------------------------------


def test_unpack_of_a_staged_model_failing_its_checksum_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """A model.pt staged on disk (over IN_MEMORY_BYTES, here 1 byte) whose SHA-256 is forged: one
    line, --into left empty."""
    import torch

    monkeypatch.setattr(transfer, "IN_MEMORY_BYTES", 1)
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(3)}, buffer)

    def forge(manifest: bytes) -> bytes:
        values = json.loads(manifest)
        for entry in values["members"]:
            if entry["path"].endswith("/model.pt"):
                entry["sha256"] = hashlib.sha256(buffer.getvalue()[:-1]).hexdigest()
        return json.dumps(values).encode()

    archive = archive_of(tmp_path, {SHOT: {**finished_files(FEDAVG[0]), "model.pt": buffer.getvalue()}}, forge=forge)
    into = tmp_path / "into"
    into.mkdir()
    refused(capsys, archive_main(["unpack", str(archive), "--into", str(into)]), "fails its checksum", into)
    assert list(into.iterdir()) == []


@pytest.mark.parametrize(
    "form, extra",
    [
        ("fedrepro-runs/1", {"kind": "archive"}),
        ("fedrepro-runs/1", {"written_at": "2025-01-01T00:00:00+00:00"}),
        ("fedrepro-runs/2", {"kind": "archive", "written_at": "2025-01-01T00:00:00+00:00", "packed_at": "2025"}),
        ("fedrepro-runs/2", {"kind": "campaign", "written_at": "2025-01-01T00:00:00+00:00"}),
        ("fedrepro-campaign/1", {"written_at": "2025-01-01T00:00:00+00:00"}),
    ],
)
def test_unpack_refuses_a_manifest_mixing_the_formats_keys_or_of_another_kind(tmp_path, capsys, form, extra):
    """An old manifest with the new keys, a new one with the old, or one of the campaign kind: refused in one line."""

    def forge(manifest: bytes) -> bytes:
        return json.dumps({**json.loads(manifest), "format": form, **extra}).encode()

    archive, root = archive_of(tmp_path, {SHOT: finished_files(FEDAVG[0])}, forge=forge), tmp_path / "project"
    refused(capsys, archive_main(["unpack", str(archive), "--into", str(root)]), "error: ", root)


def test_import_refuses_an_archive_of_runs_in_one_line(tmp_path, capsys):
    """An archive of runs (fedrepro-runs/1) given to `campaign import`: one line, nothing written."""
    archive, root = archive_of(tmp_path, {SHOT: finished_files(FEDAVG[0])}), tmp_path / "project"
    refused(capsys, main_import(archive, root), "is not a campaign state's file", root)
    main_import(archive, root)
    assert "looks like an archive of runs, which python -m shared.archive unpack FILE reads" in err_lines(capsys)[0]


def test_a_manifest_twice_is_refused(genuine, tmp_path, capsys):
    """Two manifest.json members (the second one forging the first): refused in one line, nothing written."""
    raw = gzip.decompress(write_crafted(crafted(genuine), tmp_path / "g.tar.gz").read_bytes())
    end = raw.rfind(b"manifest.json") // 512 * 512  # the manifest's header
    path = tmp_path / "state.tar"
    path.write_bytes(raw[:end] + member("manifest.json", b"{}") + raw[end:])
    root = tmp_path / "project"
    refused(capsys, main_import(path, root), "appears twice", root)
