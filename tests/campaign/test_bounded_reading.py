"""Runs from another machine read within bounds of depth, memory and time: a third set of
crafted states and archives, each a case an adversarial review found to crash `campaign import`
with a traceback, to pass the checks and break a later command, to take gigabytes or minutes, or
to replace training in progress.

- depth: a round's record, or a checkpoint's values, nested past what any checker walks;
- schema: a checkpoint's history holding a tensor; a count of thousands of digits; client
  samples or an environment record that the tables' provenance and the cost model cannot read;
- memory: a checkpoint of compressed records (torch.load inflates them), a round's record of
  megabytes;
- time: thousands of made-up runs in progress, whose config.yaml would each be parsed to size
  their checkpoints;
- archives: a failure from elsewhere over a run in progress here.

Each run's case asserts that run alone is left out in one line and the others are imported.
"""

import io
import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from shared.archive import main as archive_main
from shared.campaign import state_reading
from shared.campaign.carried_runs import MAX_RECORD_BYTES, torch_file_problem
from shared.runs.files import RunFilesError, read_history
from shared.runs.strict_text import MAX_DEPTH, StrictTextError, strict_json, strict_yaml
from tests.campaign.carried_states import checkpoint, finished_files, history, jsonl, progress_files
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
)
from tests.campaign.test_one_door import archive_of

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("small_floor")


def nested(depth: int):
    value = []
    for _ in range(depth - 1):
        value = [value]
    return value


def saved(state: dict) -> bytes:
    buffer = io.BytesIO()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # pickling a value 700 deep (Python 3.12 pickles at most some 800)
    try:
        torch.save(state, buffer)
    finally:
        sys.setrecursionlimit(limit)
    return buffer.getvalue()


def deflated(torch_file: bytes) -> bytes:
    """The same records, compressed: what torch.load inflates, and torch.save never writes."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(torch_file)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zipped:
        for record in source.infolist():
            zipped.writestr(record.filename, source.read(record))
    return out.getvalue()


def checkpoint_with(records: list[dict], **changes) -> bytes:
    base = torch.load(io.BytesIO(checkpoint(FEDPROX, history(FEDPROX, 1))), weights_only=True)
    return saved({**base, "history": records, **changes})


def with_count(partition: bytes, count: str) -> bytes:
    """partition.csv with client 0's first count replaced."""
    lines = partition.decode().splitlines()
    lines[1] = ",".join(["0", count, *lines[1].split(",")[2:]])
    return ("\n".join(lines) + "\n").encode()


def finished_cases():
    cfg, files = FEDAVG[0], finished_files(FEDAVG[0])
    records = history(cfg, cfg.federation.rounds)
    yield "a record nested 600 deep", with_history(cfg, [{**records[0], "x": nested(600)}, *records[1:]])
    yield "a record of 70 kB", with_history(cfg, [{**records[0], "x": "a" * 70_000}, *records[1:]])
    yield "a count of 5,000 digits", {**files, "partition.csv": with_count(files["partition.csv"], "1" * 5000)}
    # counts the client samples agree with, too large for the cost model's floats
    huge = with_count(files["partition.csv"], "9" * 400)
    samples = [sum(map(int, row.split(",")[1:])) for row in huge.decode().splitlines()[1:]]
    yield (
        "a count of 400 digits, samples agreeing",
        edited_summary({**files, "partition.csv": huge}, client_samples=samples),
    )
    yield "a commit that is a number", edited_summary(files, environment={"git_commit": 1})
    yield "a runtime setting that is a list", edited_summary(files, runtime={"trainer.device": ["cuda"]})


def progress_cases():
    files, records = progress_files(FEDPROX), history(FEDPROX, 1)
    yield (
        "a tensor in its checkpoint's history",
        {
            **files,
            "checkpoint.pt": checkpoint_with([{**records[0], "x": torch.zeros(1)}]),
        },
    )
    yield (
        "method state nested 700 deep",
        {**files, "checkpoint.pt": checkpoint_with(records, method={"x": nested(700)})},
    )
    yield "a checkpoint of compressed records", {**files, "checkpoint.pt": deflated(files["checkpoint.pt"])}
    yield "a history record of 70 kB", {**files, "metrics.jsonl": jsonl([{**records[0], "x": "a" * 70_000}])}


CASES = {
    **{f"finished: {name}": ("finished", SHOT, files) for name, files in finished_cases()},
    **{f"progress: {name}": ("progress", PROX, files) for name, files in progress_cases()},
}


@pytest.mark.parametrize("case", CASES)
def test_a_run_past_the_bounds_is_left_out_in_one_line_and_the_others_are_imported(
    genuine, tmp_path, monkeypatch, capsys, case
):
    kind, rid, files = CASES[case]
    state = crafted(genuine)
    set_run(state, kind, rid, files)
    code, root, outside = import_crafted(state, tmp_path, monkeypatch)
    err = [line for line in err_lines(capsys) if not line.startswith("note: ")]
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: run {rid} ({kind}) is left out"), err
    shipped, runs = root / "results" / "shipped" / "runs", root / "results" / "runs"
    assert {p.parent.name for p in shipped.glob("*/metrics.json")} == {SHOT, OTHER} - {rid}
    assert (runs / PROX / "checkpoint.pt").is_file() == (rid != PROX)
    assert list(outside.iterdir()) == []


def test_text_nested_past_the_limit_is_refused_at_any_depth():
    assert strict_json(json.dumps(nested(MAX_DEPTH))) == nested(MAX_DEPTH)
    for text in (json.dumps(nested(MAX_DEPTH + 1)), json.dumps({"a": nested(900)})):
        with pytest.raises(StrictTextError, match="nest more than"):
            strict_json(text)
    assert strict_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH) == nested(MAX_DEPTH)
    # refused from the parser's events, before a node is built: no recursion at any depth
    for text in ("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "- " * 100_000 + "x"):
        with pytest.raises(StrictTextError, match="nest more than"):
            strict_yaml(text)


YAML_CASES = [
    "run_id: abc\nlocal: {lr: 0.01, epochs: 10}\nseeds: [0, 1.5e-3, .inf, 0x1f, 1:30, '1:59']\n",
    "a: &x 1\nb: *x\n",
    "a: !!binary aGk=\n",
    "a: 1\n1.0: 2\na: 3\n",
    "? [1]\n: 2\n",
    "a: " + "[" * (MAX_DEPTH + 1),
    "a: 1" + ":59" * 40,
    "a: [1, 2",
]


def test_yaml_numbers_are_short_and_a_history_line_refused_whole_is_named(tmp_path):
    with pytest.raises(StrictTextError, match="a number of more than 64 characters"):
        strict_yaml("a: 1" + ":59" * 300_000)  # sexagesimal: time squared in its length (minutes at 4 MiB)
    (tmp_path / "metrics.jsonl").write_text('{"round": 1}\n{"round": 2, "round": 2}\n')
    with pytest.raises(RunFilesError, match="line 2: the key 'round' appears twice"):
        read_history(tmp_path)  # complete, so not cut short by a copy: damage, not left out


def outcomes(read) -> list[str]:
    found = []
    for text in YAML_CASES:
        try:
            found.append(repr(read(text)))
        except Exception as exc:
            found.append(f"{type(exc).__name__}: {exc}" if isinstance(exc, StrictTextError) else type(exc).__name__)
    return found


def test_yaml_reads_alike_where_pyyaml_has_no_libyaml():
    script = (
        "import json, sys, yaml\n"
        "del yaml.CSafeLoader\n"
        "from tests.campaign.test_bounded_reading import outcomes\n"
        "from shared.runs.strict_text import SafeLoader, strict_yaml\n"
        "assert SafeLoader is yaml.SafeLoader\n"
        "print(json.dumps(outcomes(strict_yaml)))\n"
    )
    pure = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(pure.stdout) == outcomes(strict_yaml)


def test_a_record_at_the_limit_is_read(genuine, tmp_path, monkeypatch, capsys):
    """The limit is on a line's bytes, not below it: a record just under it imports."""
    cfg = FEDAVG[0]
    records = history(cfg, cfg.federation.rounds)
    padding = MAX_RECORD_BYTES - len(json.dumps({**records[0], "x": ""})) - 1
    state = crafted(genuine)
    set_run(state, "finished", SHOT, with_history(cfg, [{**records[0], "x": "a" * padding}, *records[1:]]))
    code, root, _ = import_crafted(state, tmp_path, monkeypatch)
    assert code == 0, err_lines(capsys)
    assert (root / "results" / "shipped" / "runs" / SHOT / "metrics.json").is_file()


def sized_configs(monkeypatch, config: bytes, runs: int) -> list[int]:
    """The sizes of the config.yaml files parsed to size the model files of `runs` runs in
    progress, each holding `config`, their headers read as a state's are."""
    parsed = []
    monkeypatch.setattr(state_reading, "run_config", lambda config: parsed.append(len(config)))
    members, cache = {}, {}
    for i in range(runs):
        folder = f"progress/{i:016x}"
        members.update({f"{folder}/config.yaml": config, f"{folder}/metrics.jsonl": b"{}\n"})
        for file in ("checkpoint.pt", "client_state/m-0-r1.pt"):
            state_reading.header_limit(f"{folder}/{file}", members, cache)
        members[f"{folder}/partition.csv"] = b"client,0\n0,1\n"
        state_reading.header_limit(f"{folder}/client_state/m-1-r1.pt", members, cache)
    return parsed


def test_sizing_model_files_parses_each_config_once_and_a_bounded_amount_in_all(monkeypatch):
    """A state's model files are sized by their run's config (`model_limit`); a file of many
    made-up runs would have each config.yaml parsed, slowly, before any run is checked. Each is
    parsed once, at most SIZING_YAML_PER_RUN a run over MAX_SIZING_YAML_BYTES in all, so that
    thousands of real configs (some 1.2 kB) are each parsed, and large made-up ones soon are not."""
    large = b"a: 1\n" * 2000  # 10 kB
    over = len(large) - state_reading.SIZING_YAML_PER_RUN
    assert sized_configs(monkeypatch, large, 300) == [len(large)] * (state_reading.MAX_SIZING_YAML_BYTES // over)
    real = b"a: 1\n" * 250  # 1.25 kB
    assert sized_configs(monkeypatch, real, 3000) == [len(real)] * 3000


def test_unpack_leaves_a_run_in_progress_here_for_its_failure_elsewhere(tmp_path, capsys):
    """An archive's recorded failure is retried by the workflow; here the same run is in
    progress, and its checkpoint, history and partition stay as they are."""
    cfg = FEDAVG[0]
    failure = {
        **finished_files(cfg),
        "metrics.jsonl": jsonl(history(cfg, 1)),
        "metrics.json": json.dumps({"run_id": SHOT, "status": "failed: RuntimeError: out of memory"}).encode(),
    }
    archive = archive_of(tmp_path, {SHOT: failure})
    run_dir = tmp_path / "project" / "results" / "runs" / SHOT
    run_dir.mkdir(parents=True)
    here = {"checkpoint.pt": b"three rounds", "metrics.jsonl": jsonl(history(cfg, 3)), "partition.csv": b"local"}
    for name, data in here.items():
        (run_dir / name).write_bytes(data)
    assert archive_main(["unpack", str(archive), "--into", str(tmp_path / "project")]) == 0
    assert "1 failed there, in progress here: left to resume" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name != ".lock"} == here


def test_unpack_refuses_a_failure_whose_history_is_not_a_runs(tmp_path, capsys):
    cfg = FEDAVG[0]
    failure = {
        **finished_files(cfg),
        "metrics.jsonl": b"garbage that is no JSON\n",
        "metrics.json": json.dumps({"run_id": SHOT, "status": "failed: RuntimeError"}).encode(),
    }
    archive = archive_of(tmp_path, {SHOT: failure})
    assert archive_main(["unpack", str(archive), "--into", str(tmp_path / "project")]) == 2
    err = err_lines(capsys)
    assert len(err) == 1 and "metrics.jsonl is not one JSON record a line" in err[0], err
    assert not (tmp_path / "project" / "results").exists()


def test_a_model_file_whose_entries_share_one_record_is_refused():
    """Two central-directory entries naming the same stored bytes: each under its limit, yet
    torch.load would read the bytes once per entry (a review's 1 MB file loaded 50 MB)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zipped:
        zipped.writestr("rec0", bytes(1000))
    data = buffer.getvalue()
    central, end = data.index(b"PK\x01\x02"), data.index(b"PK\x05\x06")
    entry = data[central:end]
    signature, disk, disk_cd, count, total, size, offset, comment = struct.unpack("<4s4H2LH", data[end : end + 22])
    eocd = struct.pack("<4s4H2LH", signature, disk, disk_cd, count + 1, total + 1, size + len(entry), offset, comment)
    twice = data[:end] + entry.replace(b"rec0", b"rec1") + eocd
    assert torch_file_problem(io.BytesIO(data)) is None
    assert "records read more than once" in torch_file_problem(io.BytesIO(twice))
