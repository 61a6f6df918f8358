"""State files from other machines are a trust boundary (issue 33).

One genuine state of FedCAD Table 4 at smoke scale is written once, without training (two
finished FedAvg runs and a FedProx checkpoint, tests/campaign/carried_states.py), and mutated along each
class of damage or forgery: the manifest's keys (missing, of a wrong type, of a value that
escapes), its raw bytes, the archive's members (names, kinds, types, duplicates, sizes, bombs),
the parts on disk, a finished run's files and a checkpoint's. A mutation of the state as a whole
is refused in one line with nothing written; a mutation of one run refuses that run alone, in
one line, and the others are imported.
"""

import copy as copying
import dataclasses
import errno
import gzip
import io
import json
import os
import pickle
import tarfile
from pathlib import Path

import pytest
import torch

from shared.campaign import ship
from shared.campaign.cli import main
from shared.campaign.state import read_state
from shared.campaign.state_reading import MAX_SMALL_BYTES, REQUIRED_KEYS
from shared.config.dotted import deep_merge
from shared.config.schema import identity, run_id
from shared.runs import transfer
from shared.runs.files import sha256, write_atomically
from shared.runs.metrics import summarize
from shared.targets.configs import load_config
from shared.targets.table_declarations import expand, get_table
from tests.campaign.carried_states import (
    checkpoint,
    config_yaml,
    finished_files,
    history,
    jsonl,
    progress_files,
)

pytestmark = pytest.mark.usefixtures("small_floor")

TARGET = "papers/fedcad/table4"
ABOUT = {"targets": [TARGET], "scale": "smoke", "copy": None}


def cell_config(label: str, seed: int, table=("fedcad", "table4"), scale="smoke"):
    return next(c.config for c in expand(get_table(*table), scale) if c.row.label == label and c.seed == seed)


FEDAVG = [cell_config("FedAvg", 0), cell_config("FedAvg", 1)]
FEDPROX = cell_config("FedProx", 0)
SHOT, OTHER, PROX = run_id(FEDAVG[0]), run_id(FEDAVG[1]), run_id(FEDPROX)


@dataclasses.dataclass
class Crafted:
    """A state being mutated: the manifest, the members (name, bytes, or a TarInfo written as
    it is), and whether the manifest lists the members as they now are."""

    manifest: dict
    members: list
    relist: bool = True
    manifest_bytes: bytes | None = None


def crafted(genuine) -> Crafted:
    manifest, members = genuine
    return Crafted(copying.deepcopy(manifest), [(name, data) for name, data in members.items()])


def write_crafted(state: Crafted, path: Path) -> Path:
    regular = [(m[0], m[1]) for m in state.members if isinstance(m[0], str)]
    if state.relist:
        state.manifest["members"] = [{"path": n, "sha256": sha256(d), "size": len(d)} for n, d in regular]
    manifest = state.manifest_bytes if state.manifest_bytes is not None else json.dumps(state.manifest).encode()
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as stream:
        with tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for member in [*state.members, (MANIFEST_INFO(len(manifest)), manifest)]:
                info, data = member
                if isinstance(info, str):
                    info = tarfile.TarInfo(info)
                    info.size = len(data)
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def MANIFEST_INFO(size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo("manifest.json")
    info.size = size
    return info


def run_files(state: Crafted, kind: str, rid: str) -> dict[str, bytes]:
    prefix = f"{kind}/{rid}/"
    return {m[0][len(prefix) :]: m[1] for m in state.members if isinstance(m[0], str) and m[0].startswith(prefix)}


def set_run(state: Crafted, kind: str, rid: str, files: dict[str, bytes], as_id: str | None = None) -> None:
    prefix = f"{kind}/{rid}/"
    state.members = [m for m in state.members if not (isinstance(m[0], str) and m[0].startswith(prefix))]
    state.members += [(f"{kind}/{as_id or rid}/{name}", data) for name, data in files.items()]


def import_crafted(state: Crafted, tmp_path: Path, monkeypatch, build_tables=False) -> tuple[int, list[str], Path]:
    """`import` of the crafted state into a fresh project beside an `outside` folder."""
    if not build_tables:  # built and checked once, below: each case here is about what ships
        monkeypatch.setattr(ship, "build_shipped_table", lambda *a: None)
        monkeypatch.setattr(ship, "build_shipped_figure", lambda *a: None)
    root, outside = tmp_path / "project", tmp_path / "outside"
    root.mkdir(exist_ok=True)
    outside.mkdir(exist_ok=True)
    path = write_crafted(state, tmp_path / "state.tar.gz")
    code = main(["import", str(path), "--root", str(root)])
    return code, root, outside


def err_lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


# --- the state as a whole: refused in one line, nothing written ---------------------------------

WRONG_TYPES = {
    "none": None,
    "int": 7,
    "float": 1.5,
    "bool": True,
    "str": "x",
    "list": [],
    "dict": {},
    "list of str": ["x"],
    "list of dict": [{}],
}
VALID = {("copy", "none"), ("ledger", "list")}  # the official data; no run finished elsewhere
KEYS = sorted(REQUIRED_KEYS | {"ledger"})
ESCAPING = {
    "targets": [
        ["papers/fedcad/table9"],
        ["../../outside"],
        ["papers/../../x/table4"],
        [TARGET, TARGET],
        ["papers/fedcad/table4/../../../x"],
        ["/etc/passwd"],
    ],
    "scale": ["huge", "../../outside", "Smoke"],
    "copy": [
        {"dataset": "../../outside", "sha256": "0" * 64, "kind": "", "path": None},
        {"dataset": "cifar10", "sha256": "0" * 64, "kind": "../../outside", "path": None},
        {"dataset": "cifar10", "sha256": "A" * 64, "kind": "", "path": None},
        {"dataset": "cifar10", "sha256": "0" * 64, "kind": "", "path": "/etc"},
        {"dataset": "cifar100", "sha256": "0" * 64, "kind": "", "path": None},
        {"dataset": "cifar10", "sha256": "0" * 64},
    ],
    "written_at": ["2025-01-01T00:00:00", "yesterday", "2025-13-01T00:00:00+00:00"],
    "ledger": [["g" * 16], ["b" * 16, "a" * 16], ["a" * 16, "a" * 16], ["A" * 16], [1]],
    "format": ["fedrepro-runs/1", "fedrepro-campaign/2"],
}
ENTRY_FORGERIES = {
    "size negative": ("size", -1),
    "size text": ("size", "3"),
    "size bool": ("size", True),
    "size missing": ("size", KeyError),
    "sha short": ("sha256", "abc"),
    "path up": ("path", "../x"),
    "path manifest": ("path", "manifest.json"),
    "extra key": ("extra", 1),
}
RAW_MANIFESTS = {
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "not utf-8": b"\xff\xfe{}",
    "torn": b'{"format": ',
    "null": b"null",
    "list": b"[]",
    "deep object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
}


def set_key(state: Crafted, key: str, value) -> None:
    state.manifest[key] = copying.deepcopy(value)
    state.relist = state.relist and key != "members"  # the members as the mutation leaves them


def manifest_mutations():
    for key in KEYS:
        if key in REQUIRED_KEYS:
            yield f"{key} missing", lambda s, k=key: (set_key(s, k, None), s.manifest.pop(k))
        for name, value in WRONG_TYPES.items():
            if (key, name) not in VALID:
                yield f"{key} {name}", lambda s, k=key, v=value: set_key(s, k, v)
        for value in ESCAPING.get(key, []):
            yield f"{key}={str(value)[:40]}", lambda s, k=key, v=value: set_key(s, k, v)
    yield "unknown key", lambda s: s.manifest.__setitem__("run_this", "rm -rf /")
    for name, (field, value) in ENTRY_FORGERIES.items():

        def forge(s, field=field, value=value):
            s.relist = False
            s.manifest["members"] = [dict(e) for e in s.manifest["members"]]
            entry = s.manifest["members"][0]
            entry.pop(field) if value is KeyError else entry.__setitem__(field, value)

        yield f"entry {name}", forge
    for name, data in RAW_MANIFESTS.items():
        yield f"raw {name}", lambda s, d=data: setattr(s, "manifest_bytes", d)


def info(name: str, kind=tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type, member.size, member.linkname = kind, size, link
    return member


def zeros(size: int) -> bytes:
    return bytes(size)


def archive_mutations():
    finished = f"finished/{SHOT}"
    yield "member twice", lambda s: s.members.append(s.members[0])
    yield "finished run holds a checkpoint", lambda s: s.members.append((f"{finished}/checkpoint.pt", b"x"))
    yield "finished run holds client state", lambda s: s.members.append((f"{finished}/client_state/m-0-r1.pt", b"x"))
    yield "progress run holds metrics.json", lambda s: s.members.append((f"progress/{PROX}/metrics.json", b"{}"))
    yield "unknown file", lambda s: s.members.append((f"{finished}/model.pt", b"x"))
    yield "run id not hex", lambda s: s.members.append(("finished/ABCDEF0123456789/metrics.json", b"{}"))
    yield "absolute path", lambda s: s.members.append(("/etc/cron.d/x", b"x"))
    yield "climbs out", lambda s: s.members.append((f"{finished}/../../../outside", b"x"))
    yield "both finished and in progress", lambda s: s.members.append((f"progress/{SHOT}/checkpoint.pt", b"x"))
    for name, kind, link in (
        ("symlink", tarfile.SYMTYPE, "/etc/passwd"),
        ("hard link", tarfile.LNKTYPE, "manifest.json"),
        ("fifo", tarfile.FIFOTYPE, ""),
        ("device", tarfile.CHRTYPE, ""),
        ("directory", tarfile.DIRTYPE, ""),
    ):
        yield (
            f"{name} member",
            lambda s, k=kind, link=link: s.members.append((info(f"{finished}/metrics.jsonl.x", k, 0, link), None)),
        )
    yield (
        "member unlisted",
        lambda s: (
            setattr(s, "relist", False),
            s.manifest.__setitem__(
                "members", [e for e in s.manifest["members"] if not e["path"].endswith("partition.csv")]
            ),
        ),
    )
    yield (
        "listed member absent",
        lambda s: (
            setattr(s, "relist", False),
            s.manifest["members"].append({"path": f"finished/{'0' * 16}/partition.csv", "sha256": "0" * 64, "size": 1}),
        ),
    )
    yield (
        "checksum forged",
        lambda s: (
            setattr(s, "relist", False),
            s.manifest.__setitem__(
                "members",
                [{**e, "sha256": "0" * 64} if e["path"].endswith("metrics.json") else e for e in s.manifest["members"]],
            ),
        ),
    )
    yield (
        "size forged",
        lambda s: (
            setattr(s, "relist", False),
            s.manifest.__setitem__(
                "members",
                [
                    {**e, "size": e["size"] + 1} if e["path"].endswith("metrics.json") else e
                    for e in s.manifest["members"]
                ],
            ),
        ),
    )
    yield (
        "header claims 3 GiB",
        lambda s: s.members.insert(
            0,
            (
                info(
                    f"{finished}/checkpoint.pt".replace("finished", "progress").replace(SHOT, "1" * 16), size=3 * 2**30
                ),
                None,
            ),
        ),
    )
    yield (
        "gzip bomb in a member",
        lambda s: s.members.insert(0, (f"progress/{'1' * 16}/metrics.jsonl", zeros(3 * transfer.EXPANSION_FLOOR))),
    )
    yield "gzip bomb in a pax header", lambda s: s.members.insert(0, (pax_bomb(), b""))
    yield (
        "metrics.json over its limit",
        lambda s: s.members.insert(0, (info(f"{finished}/metrics.json", size=MAX_SMALL_BYTES + 1), None)),
    )


def pax_bomb() -> tarfile.TarInfo:
    member = info(f"progress/{'1' * 16}/partition.csv")
    member.pax_headers = {"comment": "x" * 3 * transfer.EXPANSION_FLOOR}
    return member


STATE_MUTATIONS = dict([*manifest_mutations(), *archive_mutations()])


def assert_nothing_written(root: Path, outside: Path) -> None:
    assert not (root / "results").exists() and list(outside.iterdir()) == []


@pytest.mark.parametrize("mutation", STATE_MUTATIONS)
def test_a_damaged_or_forged_state_is_refused_in_one_line_before_anything_is_written(
    genuine, tmp_path, monkeypatch, capsys, mutation
):
    state = crafted(genuine)
    STATE_MUTATIONS[mutation](state)
    code, root, outside = import_crafted(state, tmp_path, monkeypatch)
    err = err_lines(capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert_nothing_written(root, outside)


# --- the parts on disk ----------------------------------------------------------------------------


def part_mutations():
    def linked(path: Path) -> None:
        real = path.with_name("real.tar.gz")
        path.rename(real)
        path.symlink_to(real)

    def fifo(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)

    def device(path: Path) -> None:
        path.unlink()
        path.symlink_to("/dev/zero")

    def linked_part(path: Path) -> None:
        data = path.read_bytes()
        path.unlink()
        half = len(data) // 2
        path.with_name(f"{path.name}.part-00").write_bytes(data[:half])
        path.with_name("elsewhere").write_bytes(data[half:])
        path.with_name(f"{path.name}.part-01").symlink_to(path.with_name("elsewhere"))

    return {
        "a link to the state": linked,
        "a FIFO": fifo,
        "a link to a device": device,
        "a part that is a link": linked_part,
    }


PART_MUTATIONS = part_mutations()


@pytest.mark.parametrize("mutation", PART_MUTATIONS)
def test_a_state_is_read_only_from_regular_files(genuine, tmp_path, capsys, mutation):
    path = write_crafted(crafted(genuine), tmp_path / "state.tar.gz")
    PART_MUTATIONS[mutation](path)
    root = tmp_path / "project"
    assert main(["import", str(path), "--root", str(root)]) == 2
    err = err_lines(capsys)
    assert len(err) == 1 and "regular file" in err[0], err
    assert not root.exists()


# --- one run forged or damaged: that run is refused, the others imported ----------------------------


def summary_of(cfg, records, status="completed") -> bytes:
    return json.dumps(summarize(records, cfg, status, 12.0, {"device": "cuda:0"})).encode()


def with_history(cfg, records, status="completed") -> dict[str, bytes]:
    """A finished run whose history and summary agree with each other, whatever they hold."""
    return {**finished_files(cfg), "metrics.jsonl": jsonl(records), "metrics.json": summary_of(cfg, records, status)}


def edited_summary(files: dict[str, bytes], **changes) -> dict[str, bytes]:
    return {**files, "metrics.json": json.dumps({**json.loads(files["metrics.json"]), **changes}).encode()}


def other_config(cfg, change: dict):
    return load_config(None, deep_merge(identity(cfg), change))


def finished_forgeries():
    """name -> files of run SHOT (FedAvg, seed 0) as the forged state carries them."""
    cfg, files, other = FEDAVG[0], finished_files(FEDAVG[0]), finished_files(FEDAVG[1])
    records = history(cfg, cfg.federation.rounds)

    def without(name):
        return {k: v for k, v in files.items() if k != name}

    yield "no config.yaml", without("config.yaml")
    yield "no metrics.jsonl", without("metrics.jsonl")
    yield "no metrics.json", without("metrics.json")
    yield (
        "config hashes elsewhere",
        {
            **files,
            "config.yaml": config_yaml(other_config(cfg, {"local": {"lr": 0.5}})).replace(
                run_id(other_config(cfg, {"local": {"lr": 0.5}})).encode(), SHOT.encode()
            ),
        },
    )
    yield (
        "config names another run",
        {**files, "config.yaml": files["config.yaml"].replace(SHOT.encode(), OTHER.encode())},
    )
    yield "config names no run", {**files, "config.yaml": b"\n".join(files["config.yaml"].splitlines()[1:])}
    yield "metrics.json of another run", {**files, "metrics.json": other["metrics.json"]}
    yield "run_id of another run", edited_summary(files, run_id=OTHER)
    yield "final_acc 99.9", edited_summary(files, final_acc=99.9)
    yield "best_acc forged", edited_summary(files, best_acc=99.9)
    yield "global_acc forged", edited_summary(files, global_acc=[99.9] * cfg.federation.rounds)
    yield "final_acc a string", edited_summary(files, final_acc="99.9")
    for value in (float("nan"), float("inf"), -5.0, 150.0):
        for key in ("global_acc", "per_class_acc", "local_accs"):
            bad = [dict(r) for r in records]
            bad[-1][key] = [value] * len(bad[-1][key]) if isinstance(bad[-1][key], list) else value
            yield f"{key} {value}, summary agreeing", with_history(cfg, bad)
    yield "completed after 1 of 4 rounds", with_history(cfg, records[:1])
    yield (
        "diverged after 1 round, summary says 4",
        edited_summary(with_history(cfg, records[:1], "diverged: nan"), rounds_completed=4),
    )
    yield "a round more than the config's", with_history(cfg, history(cfg, cfg.federation.rounds + 1))
    yield (
        "history contradicts summary",
        {**files, "metrics.jsonl": jsonl([{**r, "global_acc": 11.0} if r["round"] == 2 else r for r in records])},
    )
    yield "history renumbered", {**files, "metrics.jsonl": jsonl([{**r, "round": 1} for r in records])}
    yield "history not JSON", {**files, "metrics.jsonl": b"{]\n"}
    yield "a recorded failure", with_history(cfg, [], "failed: RuntimeError")
    yield "metrics.json not JSON", {**files, "metrics.json": b"\xff"}


def foreign_runs():
    """A run under its own id that the state's targets do not need at its scale, on its data."""
    yield "a paper-scale run", cell_config("FedAvg", 0, scale="paper")
    yield "another table's run", cell_config("FedAvg", 0, table=("fedssd", "table2"))
    yield "a seed the table has not", other_config(FEDAVG[0], {"seed": 7})


def progress_forgeries():
    """name -> files of run PROX (FedProx, seed 0, 1 round) as the forged state carries them."""
    files, records = progress_files(FEDPROX), history(FEDPROX, 1)
    yield "no checkpoint", {k: v for k, v in files.items() if k != "checkpoint.pt"}
    yield "no config.yaml", {k: v for k, v in files.items() if k != "config.yaml"}
    yield "checkpoint garbage", {**files, "checkpoint.pt": b"garbage"}
    yield "checkpoint runs code", {**files, "checkpoint.pt": pickle.dumps(Path("/tmp"))}
    buffer = io.BytesIO()
    torch.save({"run": Path("/tmp")}, buffer)
    yield "checkpoint of objects", {**files, "checkpoint.pt": buffer.getvalue()}
    yield "checkpoint of another config", {**files, "checkpoint.pt": checkpoint(FEDAVG[0], records)}
    yield "history claims more rounds", {**files, "metrics.jsonl": jsonl(history(FEDPROX, 3))}
    yield "history counted by lines", {**files, "metrics.jsonl": files["metrics.jsonl"] + b"\n\n\n"}
    yield "history beside another checkpoint", {**files, "checkpoint.pt": checkpoint(FEDPROX, history(FEDPROX, 2))}
    yield "another run's config", {**files, "config.yaml": config_yaml(FEDAVG[0])}
    yield (
        "more rounds than the config's",
        {
            **files,
            "metrics.jsonl": jsonl(history(FEDPROX, 5)),
            "checkpoint.pt": checkpoint(FEDPROX, history(FEDPROX, 5)),
        },
    )
    yield (
        "accuracy 150 in its history",
        {
            **files,
            "metrics.jsonl": jsonl([{**records[0], "global_acc": 150.0}]),
            "checkpoint.pt": checkpoint(FEDPROX, [{**records[0], "global_acc": 150.0}]),
        },
    )


RUN_FORGERIES = {
    **{f"finished: {name}": ("finished", SHOT, files, None) for name, files in finished_forgeries()},
    **{f"foreign: {name}": ("finished", run_id(cfg), finished_files(cfg), cfg) for name, cfg in foreign_runs()},
    **{f"progress: {name}": ("progress", PROX, files, None) for name, files in progress_forgeries()},
}


@pytest.mark.parametrize("forgery", RUN_FORGERIES)
def test_a_forged_or_damaged_run_is_named_in_one_line_and_the_others_are_imported(
    genuine, tmp_path, monkeypatch, capsys, forgery
):
    kind, rid, files, foreign = RUN_FORGERIES[forgery]
    state = crafted(genuine)
    if foreign is None:
        set_run(state, kind, rid, files)
    else:
        state.members += [(f"finished/{rid}/{name}", data) for name, data in files.items()]
    code, root, outside = import_crafted(state, tmp_path, monkeypatch)
    err = [line for line in err_lines(capsys) if not line.startswith("note: ")]
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: run {rid} ({kind}) is left out"), err
    shipped, runs = root / "results" / "shipped" / "runs", root / "results" / "runs"
    assert not (shipped / rid).exists() and not (runs / rid / "checkpoint.pt").exists()
    genuine_finished = {SHOT, OTHER} - {rid}
    assert {p.parent.name for p in shipped.glob("*/metrics.json")} == genuine_finished
    assert (runs / PROX / "checkpoint.pt").is_file() == (rid != PROX)
    assert list(outside.iterdir()) == []


# --- what the genuine state does -------------------------------------------------------------------


def test_the_genuine_first_session_state_imports_and_builds_its_partial_table(genuine, tmp_path, monkeypatch, capsys):
    """FedAvg finished, FedProx in progress: FedCAD Table 4's inconsistency note on FedLSD (a
    row not finished) goes with the row, and the partial table is built."""
    code, root, outside = import_crafted(crafted(genuine), tmp_path, monkeypatch, build_tables=True)
    assert code == 0, capsys.readouterr().err
    table = root / "results" / "shipped" / "tables" / "smoke" / "fedcad" / "table4"
    assert "partial: 1 of 4 rows, seeds [0, 1] of [0, 1]" in (table / "table.tex").read_text()
    assert (root / "results" / "runs" / PROX / "checkpoint.pt").is_file()
    assert not list(table.parent.glob(".*"))  # no build folder left


def test_a_local_checkpoint_of_fewer_rounds_is_moved_aside_never_overwritten(genuine, tmp_path, monkeypatch, capsys):
    state = crafted(genuine)
    set_run(state, "progress", PROX, {**progress_files(FEDPROX, 2)})
    local = tmp_path / "project" / "results" / "runs" / PROX
    local.mkdir(parents=True)
    for name, data in progress_files(FEDPROX, 1).items():
        (local / name).write_bytes(data)
    (local / "client_state").mkdir()
    (local / "client_state" / "m-0-r0.pt").write_bytes(b"round 1's")
    before = (local / "checkpoint.pt").read_bytes()
    code, root, _ = import_crafted(state, tmp_path, monkeypatch)
    assert code == 0, capsys.readouterr().err
    assert (local / "checkpoint.pt").read_bytes() == progress_files(FEDPROX, 2)["checkpoint.pt"]
    aside = list(local.glob("checkpoint.pt.replaced-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == before
    assert len(list(local.glob("metrics.jsonl.replaced-*"))) == 1
    assert [p.read_bytes() for p in local.glob("client_state.replaced-*/m-0-r0.pt")] == [b"round 1's"]
    assert "is kept as checkpoint.pt.replaced-" in capsys.readouterr().err


@pytest.mark.parametrize("planted", ["client_state", "run folder", "shipped tables", "shipped runs", "lock"])
def test_nothing_is_written_or_removed_through_a_symbolic_link(genuine, tmp_path, monkeypatch, capsys, planted):
    outside, root = tmp_path / "outside", tmp_path / "project"
    (outside / "victim").mkdir(parents=True)
    (outside / "victim" / "m-0-r9.pt").write_bytes(b"keep me")
    (outside / "lock").write_bytes(b"keep me")
    runs, shipped = root / "results" / "runs", root / "results" / "shipped"
    link = {
        "client_state": runs / PROX / "client_state",
        "run folder": runs / PROX,
        "shipped tables": shipped / "tables",
        "shipped runs": shipped / "runs" / SHOT,
        "lock": runs / PROX / ".lock",
    }[planted]
    link.parent.mkdir(parents=True, exist_ok=True)
    if planted == "client_state":
        for name, data in progress_files(FEDPROX, 1).items():  # fewer rounds than the state's: replaced
            (runs / PROX / name).write_bytes(data)
        set_run(state := crafted(genuine), "progress", PROX, progress_files(FEDPROX, 2))
    else:
        state = crafted(genuine)
    link.symlink_to(outside / ("lock" if planted == "lock" else "victim"))
    code, _, _ = import_crafted(state, tmp_path, monkeypatch, build_tables=True)
    err = err_lines(capsys)
    assert code == 2 and len(err) == 1 and "symbolic link" in err[0], err
    assert sorted(p.name for p in outside.rglob("*")) == ["lock", "m-0-r9.pt", "victim"]
    assert (outside / "lock").read_bytes() == b"keep me" and (
        outside / "victim" / "m-0-r9.pt"
    ).read_bytes() == b"keep me"
    assert not list((root / "results").rglob("metrics.json"))  # nothing shipped or restored


def test_a_failed_table_build_leaves_the_table_before_it_and_names_its_folder(genuine, tmp_path, monkeypatch, capsys):
    code, root, _ = import_crafted(crafted(genuine), tmp_path, monkeypatch, build_tables=True)
    table = root / "results" / "shipped" / "tables" / "smoke" / "fedcad" / "table4"
    assert code == 0 and (table / "table.tex").is_file()
    before = {p.name: p.read_bytes() for p in table.iterdir()}
    from shared.reporting import tables

    def disk_full(table_, scale, runs_dir, out, runtime=None):
        Path(out).mkdir(parents=True)
        (Path(out) / "table.tex").write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tables, "build_table", disk_full)
    capsys.readouterr()
    assert main(["import", str(tmp_path / "state.tar.gz"), "--root", str(root)]) == 2
    err = err_lines(capsys)
    assert len(err) == 1 and "No space left" in err[0] and str(table) in err[0], err
    assert {p.name: p.read_bytes() for p in table.iterdir()} == before
    assert not list(table.parent.glob(".*"))


def test_a_failed_write_names_its_file(tmp_path):
    def fail(tmp):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as raised:
        write_atomically(tmp_path / "table.csv", fail)
    assert str(tmp_path / "table.csv") in str(raised.value) and not list(tmp_path.iterdir())


# --- train --state -----------------------------------------------------------------------------------


def fake_trainer(monkeypatch) -> list[str]:
    """The campaign's run (timed_rounds.run_timed) as a run that finishes at once with genuine
    files, its id recorded."""
    from shared.training import timed_rounds

    trained = []

    def run(cfg, out, deadline=None):
        trained.append(Path(out).name)
        Path(out).mkdir(parents=True, exist_ok=True)
        for name, data in finished_files(cfg).items():
            (Path(out) / name).write_bytes(data)

    monkeypatch.setattr(timed_rounds, "run_timed", run)
    return trained


def train_args(tmp_path, state: Path, *extra) -> list[str]:
    return [
        "train",
        TARGET,
        "--device",
        "cpu",
        "--minutes",
        "60",
        "--state",
        str(state),
        "--root",
        str(tmp_path / "project"),
        "--data-root",
        str(tmp_path / "data"),
        *extra,
    ]


@pytest.mark.parametrize(
    "mutation", ["targets=['papers/fedcad/table9']", "scale=huge", "copy=cifar10 absent", "written_at naive"]
)
def test_train_resolves_the_states_targets_and_copy_before_any_round(genuine, tmp_path, monkeypatch, capsys, mutation):
    state = crafted(genuine)
    key, _, value = mutation.partition("=")
    if mutation == "copy=cifar10 absent":  # a genuine manifest whose copy is not on this machine
        state.manifest["copy"] = {"dataset": "cifar10", "sha256": "0" * 64, "kind": "", "path": None}
        state.members = []
    elif key == "written_at naive":
        state.manifest["written_at"] = "2025-01-01T00:00:00"
    else:
        state.manifest[key] = eval(value) if value.startswith("[") else value
    trained = fake_trainer(monkeypatch)
    path = write_crafted(state, tmp_path / "state.tar.gz")
    assert main(train_args(tmp_path, path)) == 2
    err = err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert trained == [] and not (tmp_path / "project" / "results").exists()


def test_a_bad_checkpoint_in_the_state_refuses_that_run_alone_and_training_goes_on(
    genuine, tmp_path, monkeypatch, capsys
):
    state = crafted(genuine)
    set_run(state, "progress", PROX, {**progress_files(FEDPROX), "config.yaml": config_yaml(FEDAVG[0])})
    trained = fake_trainer(monkeypatch)
    path = write_crafted(state, tmp_path / "state.tar.gz")
    assert main(train_args(tmp_path, path)) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert f"note: run {PROX} (progress) is left out of the state" in err
    assert PROX in trained and SHOT not in trained and len(trained) == 6  # 8 runs, 2 finished in the state
    members = read_state(path)[1]
    assert len({name.split("/")[1] for name in members if name.startswith("finished/")}) == 8
