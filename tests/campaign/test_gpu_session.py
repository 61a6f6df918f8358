"""A campaign session: scripts/gpu-session.sh rehearsed on the CPU, units sized to the time
left, the ledger that keeps what travels small, and the runtime keys a session may set."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import types
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

import pytest

from shared.campaign import gate as session_gate
from shared.campaign import refresh, session_output, ship, unit_sizing
from shared.campaign import state as campaign_state
from shared.campaign import train as campaign_train
from shared.campaign.cli import main
from shared.campaign.runtime import with_runtime
from shared.campaign.session_checks import carried_manifest
from shared.campaign.session_timing import SessionTiming, unit_summary
from shared.campaign.state import read_state
from shared.config.schema import ConfigError, run_id
from shared.runs.files import hold_lock
from shared.targets.copies import campaign_runs
from shared.targets.runtime_settings import parse_settings
from shared.training.round_timing import RoundTiming
from tests.campaign.test_campaign import TARGET, checkout, put_run, train

ROOT = Path(__file__).resolve().parents[2]
TABLE_II = "papers/fedssd/table2"  # the first target of a campaign: its smoke scale has 80 runs
SESSION_FILES = {"environment.json", "gate.xml", "timing.json", "session.log"}


def smoke_runs(target: str = TARGET) -> dict:
    return campaign_runs([target], "smoke", None)[0]


def test_a_session_rehearsed_on_a_cpu_returns_its_files_within_the_limits_and_a_state_that_ships(tmp_path):
    """The whole session as a GPU machine runs it, on the CPU at smoke scale: no carried state,
    no gpu test to run (gate.xml says why), training until the session's end less its margin,
    at most 6 files of at most 1 MiB; `import` of what came back ships a finished run, which
    records the runtime key the session set."""
    project = checkout(tmp_path / "project")
    shutil.copytree(ROOT / "scripts", project / "scripts")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable}  # --device cpu: one torch thread (shared.campaign.session.child_env)
    started = time.monotonic()
    proc = subprocess.run(
        [
            "bash",
            "scripts/gpu-session.sh",
            str(out),
            TARGET,
            "--scale",
            "smoke",
            "--device",
            "cpu",
            "--minutes",
            "1.5",
            "--max-files",
            "6",
            "--max-file-mib",
            "1",
            "--set",
            "trainer.deterministic=false",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert time.monotonic() - started < 1.5 * 60 + 30
    files = {p.name: p.stat().st_size for p in out.iterdir()}
    assert SESSION_FILES <= set(files) and len(files) <= 6 and max(files.values()) <= 2**20, files
    assert set(files) - SESSION_FILES <= {"state.tar.gz", *(f"state.tar.gz.part-{i:02d}" for i in range(2))}

    gate = ET.parse(out / "gate.xml").getroot()
    assert gate.find("testsuite").get("tests") == "0"
    assert "--device cpu" in gate.find(".//property").get("value")
    assert "gate: --device cpu: no CUDA device to test" in (out / "session.log").read_text()
    timing = json.loads((out / "timing.json").read_text())
    assert timing["device"] == "cpu" and timing["gpu"] is None and timing["units"]
    unit = next(u for u in timing["units"] if u["rounds"])
    assert unit["peak_gpu_memory_mib"] is None and unit["gpu_utilisation"] is None
    assert unit["lanes"] > 0 and unit["steps_per_round"] > 0 and unit["useful_share"] == 1.0  # one after another
    assert set(unit["seconds_per_round"]) == {
        "total",
        "preparation",
        "steps",
        "aggregation",
        "evaluation",
        "checkpointing",
    }
    assert unit["seconds_per_round"]["steps"] > 0

    home = checkout(tmp_path / "home")
    assert main(["import", str(out / "state.tar.gz"), "--root", str(home)]) == 0
    shipped = list((home / "results" / "shipped" / "runs").glob("*/metrics.json"))
    assert shipped, proc.stdout[-3000:]
    recorded = json.loads(shipped[0].read_text())["runtime"]
    assert recorded["trainer.deterministic"] is False and recorded["trainer.device"] == "cpu"
    assert recorded["trainer.gate"] == "not run"  # no CUDA to test: the settings as given
    listing = (home / "results" / "shipped" / "README.md").read_text()
    assert 'trainer.deterministic=false (gate: "not run")' in listing, listing


def test_a_session_refuses_bad_limits_and_id_changing_keys_in_one_line_before_writing(tmp_path):
    for target, extra, message in (
        (TARGET, ["--max-files", "4"], "--max-files 4"),
        (TARGET, ["--set", "seed=3"], "not a runtime key"),
        (TARGET, ["--minutes", "0"], "--minutes 0"),
        (TARGET, ["--max-total-mib", "1"], "--max-total-mib 1: session.log"),
        ("papers/fedssd/table99", [], "papers/fedssd/table99: "),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "shared.campaign.session", str(tmp_path / "out"), target, "--minutes", "1", *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


def test_set_takes_runtime_keys_only_and_they_keep_run_ids(tmp_path, capsys):
    settings = parse_settings(["trainer.cuda_graphs=false", "trainer.deterministic=false"])
    assert settings == {"trainer": {"cuda_graphs": False, "deterministic": False}}
    rid, cfg = next(iter(smoke_runs().items()))
    resolved = with_runtime(cfg, "cpu", None, 1, settings)
    assert run_id(resolved) == rid and not resolved.trainer.cuda_graphs and not resolved.trainer.deterministic
    with pytest.raises(ConfigError, match="local.lr is not a runtime key"):
        parse_settings(["local.lr=0.5"])
    assert (
        main(
            [
                "train",
                TARGET,
                "--scale",
                "smoke",
                "--minutes",
                "1",
                "--state",
                str(tmp_path / "s.tar.gz"),
                "--root",
                str(tmp_path),
                "--set",
                "method=fedprox",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: --set method=fedprox: method is not a runtime key") and err.count("\n") == 1
    assert not (tmp_path / "s.tar.gz").exists()


# --- unit sizing ---------------------------------------------------------------------------------


DEVICE = "NVIDIA H100 80GB HBM3"


def history(run_dir: Path, rounds: list[tuple[int, float]], steps: int = 10, device: str = DEVICE) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"round": i + 1, "slots": lanes, "steps": steps, "seconds": seconds, "device": device}) + "\n"
            for i, (lanes, seconds) in enumerate(rounds)
        )
    )


def test_a_units_round_is_measured_then_scaled_by_its_steps_then_planned_on_this_device_only(tmp_path):
    runs = smoke_runs()
    ids = list(runs)
    first, cfg = ids[0], runs[ids[0]]
    clients = unit_sizing.clients_per_round(cfg)
    same = [r for r in ids if (runs[r].method["name"], runs[r].model.name) == (cfg.method["name"], cfg.model.name)]
    other = next(
        r for r in ids if runs[r].method["name"] != cfg.method["name"] and runs[r].model.name == cfg.model.name
    )
    # unmeasured: the cost model's estimate (shared/targets/cost.py), the unit's runs one after another
    planned = unit_sizing.round_seconds([cfg, cfg], [])
    assert planned.source == "planned" and planned.seconds == pytest.approx(2 * unit_sizing.planned_seconds(cfg))
    # another method's unit of this model, 2 runs, 10 steps a round: its step time times this unit's steps
    history(tmp_path / other, [(2 * clients, 40.0), (2 * clients, 10.0), (2 * clients, 12.0)])
    measured = unit_sizing.measured_rounds(runs, tmp_path, DEVICE)
    assert [(m.seconds, m.steps) for m in measured] == [(12.0, 10)]  # the median: a first round's warm-up is out
    scaled = unit_sizing.round_seconds([cfg], measured)
    assert scaled.source.startswith("1.2 s a step") and scaled.seconds == pytest.approx(
        1.2 * unit_sizing.steps_per_round([cfg])
    )
    # a batched unit's step time follows its steps, not its lanes: two runs in one step take a
    # round as long as one run's longest client, where one after another they take every client's
    batched = [with_runtime(runs[r], "cpu", None, clients_per_step=4) for r in same[:2]]
    assert unit_sizing.steps_per_round(batched) < unit_sizing.steps_per_round([cfg, cfg])
    # rounds of another device, or of none, say nothing of this one
    assert unit_sizing.measured_rounds(runs, tmp_path, "cpu") == []
    # the same method, model and lanes: taken as measured, before any other
    history(tmp_path / first, [(clients, 3.0)])
    measured = unit_sizing.measured_rounds(runs, tmp_path, DEVICE)
    assert unit_sizing.round_seconds([cfg], measured) == unit_sizing.Estimate(3.0, "measured")
    # a round recorded before steps and devices were is no measurement
    (tmp_path / same[1]).mkdir()
    (tmp_path / same[1] / "metrics.jsonl").write_text('{"round": 1, "slots": 2, "seconds": 1.0}\n{"torn": \n')
    assert len(unit_sizing.measured_rounds(runs, tmp_path, DEVICE)) == 2


def test_a_unit_takes_the_runs_that_finish_in_the_time_left_else_all_of_them():
    runs = smoke_runs("papers/fedssd/table2")  # a method's 5 settings x 2 seeds
    cfg = next(iter(runs.values()))
    unit = [rid for rid, c in runs.items() if (c.method["name"], c.model.name) == (cfg.method["name"], cfg.model.name)][
        :3
    ]
    assert len(unit) == 3
    rounds = cfg.federation.rounds
    measured = [
        unit_sizing.Measured(cfg.method["name"], cfg.model.name, s * unit_sizing.clients_per_round(cfg), 1, 10.0 * s)
        for s in (1, 2, 3)
    ]  # a run's round 10 s, a unit's in proportion
    done = {unit[2]: rounds - 1}  # one round left
    assert unit_sizing.size_unit(unit, runs, done, 10.0 * 3 * rounds, measured)[0] == unit  # all three finish
    taken, estimate = unit_sizing.size_unit(unit, runs, done, 20.0 * rounds, measured)
    assert taken == [unit[0], unit[2]] and estimate.seconds == 20.0  # the run with one round left first
    taken, _ = unit_sizing.size_unit(unit, runs, {}, 10.0 * rounds - 1, measured)
    assert taken == unit  # none finishes: the whole unit trains until the deadline, carried on


def test_sized_units_skip_the_ledger_and_leave_the_runs_that_do_not_fit_for_later(tmp_path, monkeypatch, capsys):
    runs = smoke_runs("papers/fedssd/table2")  # groups of 5 settings
    ids = list(runs)
    args = types.SimpleNamespace(
        device="cpu", data_root=None, clients_per_step=2, root=tmp_path, ledger=frozenset(ids[:2])
    )
    units = list(campaign_train.sized_units(runs, args, time.time() + 10**6, tmp_path / "runs"))
    trained = [rid for rids, _ in units for rid in rids]
    assert sorted(trained) == sorted(ids[2:])
    # a unit of which only one run finishes in the time left: it goes first, the others next
    monkeypatch.setattr(
        unit_sizing, "round_seconds", lambda cfgs, measured: unit_sizing.Estimate(100.0 * len(cfgs), "test")
    )
    rounds = runs[ids[0]].federation.rounds
    group = next(rids for rids, _ in units if len(rids) > 1)
    sized = campaign_train.sized_units(
        {rid: runs[rid] for rid in group}, args, time.time() + 100 * rounds + 50, tmp_path / "runs"
    )
    first = next(sized)
    assert len(first[0]) == 1 and "1 of the unit's" in capsys.readouterr().err
    assert sorted(first[0] + [rid for rids, _ in sized for rid in rids]) == sorted(group)  # one at a time


def test_the_timing_of_a_batched_round_counts_its_padding():
    batched = RoundTiming(runs=2, lane_steps=(4, 2, 4, 2), lanes_per_step=4, seconds={"steps": 2.0})
    assert batched.steps == 4 and batched.useful_share == pytest.approx(12 / 16)
    alone = RoundTiming(runs=1, lane_steps=(4, 2), lanes_per_step=1, seconds={"steps": 1.0})
    assert alone.steps == 6 and alone.useful_share == 1.0
    summary = unit_summary([batched, batched])
    assert summary["useful_share"] == 0.75 and summary["lanes"] == 4 and summary["seconds_per_round"]["steps"] == 2.0


# --- the ledger ----------------------------------------------------------------------------------


def test_bundle_carries_a_ledger_and_the_checkpoints_that_fit_never_finished_runs(tmp_path, capsys):
    """Finished here or shipped: named in the ledger only; checkpoints the most advanced first
    while the bundle stays within --max-upload-mib; a bundle that cannot is refused in one line."""
    ids = list(smoke_runs())
    runs_dir, shipped = tmp_path / "results" / "runs", tmp_path / "results" / "shipped" / "runs"
    put_run(runs_dir / ids[0], ids[0], "completed")
    put_run(shipped / ids[1], ids[1], "completed")
    put_run(runs_dir / ids[2], ids[2], "failed: RuntimeError: x")  # a failure is no finished run
    for rid, rounds in ((ids[3], 3), (ids[4], 1)):
        (runs_dir / rid).mkdir(parents=True)
        (runs_dir / rid / "config.yaml").write_text(f"run_id: {rid}\n")
        (runs_dir / rid / "metrics.jsonl").write_text('{"round": 1}\n' * rounds)
        (runs_dir / rid / "checkpoint.pt").write_bytes(os.urandom(300_000))  # incompressible, as weights nearly are
    bundle = ["bundle", TARGET, "--scale", "smoke", "--no-wheels", "--root", str(tmp_path)]
    assert main([*bundle, "-o", str(tmp_path / "carry")]) == 0
    manifest, members = read_state(tmp_path / "carry" / "state.tar.gz")
    assert manifest["ledger"] == sorted(ids[:2]) and manifest["bundled"] is True  # its checkpoints are at home
    assert not [m for m in members if m.startswith("finished/")]
    assert {m.split("/")[1] for m in members} == {ids[3], ids[4]}
    assert "ledger of 2 finished runs" in capsys.readouterr().out
    assert (tmp_path / "carry" / "source-commit.txt").read_text() == "unknown\n"  # tmp_path is no git checkout

    assert main([*bundle, "-o", str(tmp_path / "small"), "--max-upload-mib", "0.4"]) == 0
    assert {m.split("/")[1] for m in read_state(tmp_path / "small" / "state.tar.gz")[1]} == {ids[3]}
    out, err = capsys.readouterr()
    assert "of the 0.4 MiB limit" in out and f"note: run {ids[4]}'s checkpoint" in err and "--max-upload-mib" in err

    assert main([*bundle, "-o", str(tmp_path / "tiny"), "--max-upload-mib", "0.0001"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --max-upload-mib 0.0001: ") and err.count("\n") == 1
    assert not (tmp_path / "tiny").exists()  # refused before anything is written

    # a piece training a run here (its lock held) would go on from the state the bundle takes away
    with hold_lock(runs_dir / ids[3] / ".lock"):
        assert main([*bundle, "-o", str(tmp_path / "busy")]) == 2
    err = capsys.readouterr().err
    assert f"error: run {ids[3]} is being trained" in err and "stop that training first" in err
    assert err.count("\n") == 1 and not (tmp_path / "busy").exists()


def test_a_returned_state_holds_what_the_session_finished_or_advanced(tmp_path):
    """Carried with a ledger: the ledger's runs are skipped and never written; a checkpoint
    carried in and not moved on stays out of the returned state; the ledger is kept."""
    ids = list(smoke_runs())
    runs_dir = tmp_path / "runs"
    for rid, rounds in ((ids[0], 2), (ids[1], 1)):
        put_run(runs_dir / rid, rid, "completed", checkpoint=True)
        (runs_dir / rid / "metrics.json").unlink()
        (runs_dir / rid / "metrics.jsonl").write_text('{"round": 1}\n' * rounds)
    put_run(runs_dir / ids[2], ids[2], "completed")  # finished in this session
    put_run(runs_dir / ids[3], ids[3], "completed")  # finished elsewhere: in the ledger
    carried = {ids[0]: 2, ids[1]: 0}  # ids[0] as carried in; ids[1] moved on from round 0
    members = campaign_state.state_members(ids, runs_dir, frozenset([ids[3]]), carried)
    assert {name.split("/", 2)[1] for name, _, _ in members} == {ids[1], ids[2]}
    args = types.SimpleNamespace(
        state=tmp_path / "back.tar.gz",
        state_targets=[TARGET],
        scale="smoke",
        copy_spec=None,
        ledger=frozenset([ids[3]]),
        carried_rounds=carried,
        part_mib=15,
        max_parts=8,
        root=tmp_path,
    )
    campaign_train.state_run_ids.cache_clear()
    campaign_train.save(args, runs_dir)
    manifest, written = read_state(args.state)
    assert manifest["ledger"] == [ids[3]] and f"finished/{ids[2]}/metrics.json" in written
    # a session's state carries no bundle's mark: carried on unimported, it keeps every checkpoint it holds
    assert "bundled" not in manifest
    again = types.SimpleNamespace(state=args.state, scale=None, targets=[TARGET], copy=None)
    campaign_state.state_defaults(again)
    assert again.carried_rounds is None and again.ledger == frozenset([ids[3]])
    assert not [m for m in written if ids[0] in m or ids[3] in m]
    with tarfile.open(args.state) as tar:  # the manifest is the archive's last member, as before
        assert tar.getnames()[-1] == "manifest.json"


def session_command(out: Path, target: str, minutes: float, *extra: str) -> list[str]:
    """scripts/gpu-session.sh on the CPU at smoke scale."""
    return [
        "bash",
        "scripts/gpu-session.sh",
        str(out),
        target,
        "--scale",
        "smoke",
        "--device",
        "cpu",
        "--minutes",
        str(minutes),
        "--set",
        "trainer.deterministic=false",
        *extra,
    ]


def test_a_session_killed_from_outside_leaves_a_state_that_imports_with_its_progress(tmp_path):
    """SIGKILL of the session's whole process group at 70% of its minutes, mid-training (Table
    II at smoke scale has 80 runs): OUTDIR holds the session's files and a whole state, no
    temporary file, the state written within REFRESH_SECONDS before the kill; `import` puts
    back its finished runs and the checkpoints of the runs in progress."""
    project = checkout(tmp_path / "project")
    shutil.copytree(ROOT / "scripts", project / "scripts")
    out, minutes = tmp_path / "out", 1.5
    proc = subprocess.Popen(
        session_command(out, TABLE_II, minutes, "--max-files", "8", "--max-file-mib", "16"),
        cwd=project,
        env={**os.environ, "PYTHON": sys.executable},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, killed whole as a walltime kills a job
    )
    time.sleep(0.7 * minutes * 60)
    os.killpg(proc.pid, signal.SIGKILL)
    killed_at = time.time()
    proc.wait()

    names = {p.name for p in out.iterdir()}
    assert names <= SESSION_FILES | {"state.tar.gz", *(f"state.tar.gz.part-{i:02d}" for i in range(8))}, names
    manifest, members = read_state(out / "state.tar.gz")
    written_at = datetime.fromisoformat(manifest["written_at"]).timestamp()
    assert killed_at - written_at < refresh.REFRESH_SECONDS + 5, (killed_at, written_at)
    finished = {name.split("/")[1] for name in members if name.startswith("finished/")}
    progress = {name.split("/")[1] for name in members if name.startswith("progress/")}
    assert finished or progress, (out / "session.log").read_text()[-3000:]
    timing = json.loads((out / "timing.json").read_text())
    assert timing["units"], timing

    home = checkout(tmp_path / "home")
    assert main(["import", str(out / "state.tar.gz"), "--root", str(home)]) == 0
    shipped = {p.parent.name for p in (home / "results" / "shipped" / "runs").glob("*/metrics.json")}
    assert shipped == finished
    assert all((home / "results" / "runs" / rid / "checkpoint.pt").is_file() for rid in progress)


def test_a_unit_refreshes_the_state_and_its_timing_between_rounds(tmp_path, monkeypatch):
    """With REFRESH_SECONDS 0, every round's end rewrites the state and timing.json: a run's
    checkpoint is in the state after its first round, before its unit ends, and timing.json
    holds the unit in progress."""
    root = checkout(tmp_path / "project")
    state, timing = tmp_path / "out" / "state.tar.gz", tmp_path / "out" / "timing.json"
    monkeypatch.setattr(refresh, "REFRESH_SECONDS", 0)
    saved, timed = [], []
    real_save, real_write = campaign_train.save, SessionTiming.write

    def save(args, runs_dir):
        written = real_save(args, runs_dir)
        saved.append(sorted(name for name in read_state(args.state)[1] if name.endswith("/metrics.jsonl")))
        return written

    def write(record):
        real_write(record)
        timed.append([unit["outcome"] for unit in json.loads(timing.read_text())["units"]])

    monkeypatch.setattr(campaign_train, "save", save)
    monkeypatch.setattr(SessionTiming, "write", write)
    units = campaign_train.training_units
    monkeypatch.setattr(campaign_train, "training_units", lambda runs, args: units(runs, args)[:1])  # one run will do
    campaign_train.state_run_ids.cache_clear()
    assert train(root, state, 2, "--timing", str(timing), "--staging", str(tmp_path / "staging")) == 0
    assert saved[0] and all(name.startswith("progress/") for name in saved[0]), saved[:3]  # after round 1
    assert len(saved) > 2 and ["in progress"] in timed and timed[-1] == ["finished"], timed
    assert sorted(p.name for p in state.parent.iterdir()) == ["state.tar.gz", "timing.json"]


def test_a_session_whose_bundle_cannot_serve_it_stops_in_one_line_within_30_s(tmp_path):
    """Data missing or corrupt (a packed copy too), a carried state unreadable or bundled for other targets: after
    environment.json and before the gate, one line on stderr and in session.log, exit 2, within
    30 s of the start; nothing else in OUTDIR."""
    carry = tmp_path / "carry"
    (carry / "data").mkdir(parents=True)
    archive = carry / "data" / "cifar-10-python.tar.gz"
    other = carry / "other.tar.gz"
    campaign_state.write_state(other, [], {"targets": [TARGET], "scale": "smoke", "copy": None})

    def garbage_state():
        (carry / "state.tar.gz").write_bytes(b"not a state")

    def damaged_packed_copy():
        (carry / "state.tar.gz").unlink()
        (carry / "data" / "copies").mkdir()
        (carry / "data" / "copies" / "mine.zip.gz").write_bytes(b"not gzip")

    cases = (
        ("paper", lambda: None, "cifar-10-python.tar.gz is missing"),
        ("paper", lambda: archive.write_bytes(b"not CIFAR-10"), "cifar-10-python.tar.gz fails its md5 checksum"),
        ("smoke", garbage_state, "cannot be read"),
        ("smoke", lambda: shutil.copy(other, carry / "state.tar.gz"), f"bundled for {TARGET}, not {TABLE_II}"),
        ("smoke", damaged_packed_copy, "copies/mine.zip.gz cannot be unpacked"),
    )
    for i, (scale, spoil, message) in enumerate(cases):
        spoil()
        out = tmp_path / f"out{i}"
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "shared.campaign.session", str(out), TABLE_II, "--minutes", "5"]
            + ["--device", "cpu", "--scale", scale, "--carry", str(carry)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert time.monotonic() - started < 30
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.strip() in (out / "session.log").read_text()
        assert {p.name for p in out.iterdir()} == {"environment.json", "session.log"}


def test_a_run_records_the_gates_verdict_beside_its_settings_and_status_shows_both(tmp_path, monkeypatch, capsys):
    """The settings a "numerical" verdict leaves (shared/campaign/gate.py's SAFEST) reach the run
    and its metrics.json; `status` shows them with the verdict."""
    root = checkout(tmp_path / "project")
    units = campaign_train.training_units
    monkeypatch.setattr(campaign_train, "training_units", lambda runs, args: units(runs, args)[:1])  # one run will do
    campaign_train.state_run_ids.cache_clear()
    settings = [f"--set={s}" for s in (*session_gate.SETTINGS["numerical"], "trainer.gate=numerical")]
    assert train(root, tmp_path / "state.tar.gz", 2, *settings) == 0
    (finished,) = [p.parent.name for p in root.glob("results/runs/*/metrics.json")]
    # the state holds it finished, as a session's check reads it (its gate's order skips it)
    assert carried_manifest(tmp_path / "state.tar.gz", [TARGET], "smoke")[1] == {finished}
    (recorded,) = [json.loads(p.read_text())["runtime"] for p in root.glob("results/runs/*/metrics.json")]
    assert recorded["trainer.gate"] == "numerical" and recorded["trainer.cuda_graphs"] is False
    assert recorded["trainer.clients_per_step"] == 1
    capsys.readouterr()
    assert main(["status", TARGET, "--scale", "smoke", "--root", str(root)]) == 0
    assert (  # CUDA graphs act only on CUDA: a CPU run's line leaves them out
        'finished: 1 run trained with trainer.device="cpu", trainer.clients_per_step=1, '
        'trainer.deterministic=true (gate: "numerical")'
    ) in capsys.readouterr().out


def test_a_methods_verdict_reaches_its_runs_over_the_sessions_settings(tmp_path, monkeypatch):
    """A gate that passed in general and failed a method's case: `train --set` the general
    verdict, `--set-for` the case's; the run of that method records the case's verdict and settings."""
    from shared.campaign.gate import Verdict
    from shared.campaign.gate_cases import GATE_DATASET, method_cases

    root = checkout(tmp_path / "project")
    units = campaign_train.training_units
    monkeypatch.setattr(campaign_train, "training_units", lambda runs, args: units(runs, args)[:1])  # one run will do
    campaign_train.state_run_ids.cache_clear()
    failing = {case: ("numerical", "an assertion") for case in method_cases([TARGET], GATE_DATASET)}
    verdict = Verdict("passed", "the general tests", failing)
    settings = [*(f"--set={s}" for s in verdict.settings()), *(f"--set-for={s}" for s in verdict.settings_for())]
    assert train(root, tmp_path / "state.tar.gz", 2, *settings) == 0
    (finished,) = [p.parent.name for p in root.glob("results/runs/*/metrics.json")]
    # the state holds it finished, as a session's check reads it (its gate's order skips it)
    assert carried_manifest(tmp_path / "state.tar.gz", [TARGET], "smoke")[1] == {finished}
    (recorded,) = [json.loads(p.read_text())["runtime"] for p in root.glob("results/runs/*/metrics.json")]
    assert recorded["trainer.gate"] == "numerical" and recorded["trainer.cuda_graphs"] is False
    assert recorded["trainer.clients_per_step"] == 1


def test_status_shows_cuda_only_settings_for_runs_on_cuda_alone(tmp_path):
    """trained_with: a CUDA run's line names its CUDA graphs; a CPU run's, which records the
    key as it was set, does not; an unreadable record is left out."""
    runtime = {"trainer.cuda_graphs": False, "trainer.clients_per_step": 1, "trainer.gate": "capture"}
    for name, device in (("a", "cuda:1"), ("c", "cpu")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps({"runtime": {"trainer.device": device, **runtime}}))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "metrics.json").write_text("{not json")
    assert sorted(ship.trained_with(sorted(tmp_path.iterdir()))) == [
        '1 run trained with trainer.device="cpu", trainer.clients_per_step=1 (gate: "capture")',
        '1 run trained with trainer.device="cuda:1", trainer.cuda_graphs=false, trainer.clients_per_step=1 '
        '(gate: "capture")',
    ]


RAISE_ONCE = '''"""A test double of a unit that raises once: the first shared.training.timed_rounds.run_timed of any
process that imports it after RAISE_ONCE's file is absent raises as a CUDA error would."""
import importlib.util
import os
import sys


class RaiseOnce:
    def find_spec(self, name, path, target=None):
        if name != "shared.training.timed_rounds":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            run = module.run_timed

            def raising_once(*args, **kwargs):
                if not os.path.exists(os.environ["RAISE_ONCE"]):
                    open(os.environ["RAISE_ONCE"], "w").close()
                    raise RuntimeError("CUDA error: an illegal memory access was encountered")
                return run(*args, **kwargs)

            module.run_timed = raising_once

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, RaiseOnce())
'''


def test_a_unit_that_raises_once_trains_in_a_fresh_process_with_safer_settings_and_the_others_too(tmp_path):
    """A session whose first unit raises (a CUDA error, through a test double): train stops
    with the state saved, the unit trains again in a fresh process with trainer.cuda_graphs=false
    and ships, recording the safer setting; then the rest train as they were, as far as the
    session's minutes go."""
    project = checkout(tmp_path / "project")
    shutil.copytree(ROOT / "scripts", project / "scripts")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(RAISE_ONCE)
    out = tmp_path / "out"
    proc = subprocess.run(
        session_command(out, TARGET, 2),
        cwd=project,
        env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(hook), "RAISE_ONCE": str(tmp_path / "raised")},
        capture_output=True,
        text=True,
        timeout=400,
    )
    log = (out / "session.log").read_text()
    assert proc.returncode == 0 and (tmp_path / "raised").is_file(), log[-3000:]
    assert "raised: once more, in a fresh process, with trainer.cuda_graphs=false" in log, log[-3000:]
    home = checkout(tmp_path / "home")
    assert main(["import", str(out / "state.tar.gz"), "--root", str(home)]) == 0
    recorded = {
        p.parent.name: json.loads(p.read_text())["runtime"] for p in home.glob("results/shipped/runs/*/metrics.json")
    }
    (retried,) = [rid for rid, runtime in recorded.items() if runtime["trainer.cuda_graphs"] is False]
    assert f"run(s) {retried} raised: once more" in log
    timing = json.loads((out / "timing.json").read_text())
    outcomes = [(u["runs"], u["outcome"]) for u in timing["units"]]
    assert outcomes[:2] == [([retried], outcomes[0][1]), ([retried], "finished")] and "raised" in outcomes[0][1]
    assert len(outcomes) > 2 and retried not in outcomes[2][0] and timing["units"][2]["rounds"] > 0, outcomes


def test_a_two_minute_session_with_no_measurement_trains_its_first_unit(tmp_path, monkeypatch, capsys):
    """Nothing measured on this device, and the cost model's round longer than the whole budget
    (as a paper-scale round on an unknown GPU may be): the first unit starts all the same; its
    rounds record their device and steps, which size the units after it."""
    root = checkout(tmp_path / "project")
    monkeypatch.setattr(unit_sizing, "planned_seconds", lambda cfg: 10_000.0)
    units = campaign_train.training_units
    monkeypatch.setattr(campaign_train, "training_units", lambda runs, args: units(runs, args)[:1])  # the first
    campaign_train.state_run_ids.cache_clear()
    assert train(root, tmp_path / "state.tar.gz", 2) == 0
    trained = [p.parent.name for p in root.glob("results/runs/*/metrics.jsonl")]
    assert len(trained) == 1, capsys.readouterr().err
    (rid,) = trained
    rounds = [json.loads(line) for line in (root / "results" / "runs" / rid / "metrics.jsonl").read_text().splitlines()]
    assert rounds and all(r["device"] == campaign_train.this_device("cpu") and r["steps"] > 0 for r in rounds)


def test_the_limits_hold_in_total_and_a_cut_log_keeps_its_first_and_last_lines(tmp_path):
    def limits(files, file_mib, total=None):
        args = types.SimpleNamespace(max_files=files, max_file_mib=file_mib, max_total_mib=total)
        return session_output.state_limits(args)

    # 8 files of 16 MiB: 128 MiB in all, of which the log 16, the state 4 files of 16
    assert limits(8, 16) == session_output.Limits(16 * 2**20, 4, 16)
    # 40 MiB in all: the log 5, the other three 1, the state 2 files of 16 (34 MiB)
    assert limits(8, 16, 40) == session_output.Limits(5 * 2**20, 2, 16)
    assert limits(8, 16, 2) == session_output.Limits(2**20 // 4, 1, 0.75)
    with pytest.raises(ValueError, match="--max-total-mib 1: session.log"):
        limits(8, 16, 1)

    log = session_output.Log(tmp_path / "session.log", 2000)
    for i in range(300):
        log.line(f"line {i:03d}")
    log.close()
    text = (tmp_path / "session.log").read_text()
    lines = text.splitlines()
    assert len(text.encode()) <= 2000 and lines[0] == "line 000" and lines[-1] == "line 299", text
    cut = next(i for i, line in enumerate(lines) if "lines left out" in line)
    assert lines[cut - 1] == f"line {cut - 1:03d}" and lines[cut + 1] == f"line {300 - len(lines) + cut + 1:03d}"
    assert f"... {300 - len(lines) + 1} lines left out" in lines[cut]


def test_runs_trained_outside_a_session_are_listed_with_no_gate(tmp_path):
    """`campaign train` on its own records `trainer.gate: null`: listed as `gate: none`, not as
    JSON's null, which no verdict of docs/gpu-sessions.md is."""
    (tmp_path / "a").mkdir()
    runtime = {"trainer.device": "cpu", "trainer.clients_per_step": 1, "trainer.gate": None}
    (tmp_path / "a" / "metrics.json").write_text(json.dumps({"runtime": runtime}))
    assert ship.trained_with([tmp_path / "a"]) == [
        '1 run trained with trainer.device="cpu", trainer.clients_per_step=1 (gate: none)'
    ]


def test_training_past_its_deadline_leaves_every_threads_stack_in_the_log():
    """A round that hangs (a kernel, a sync: no Python handler runs) is stopped from outside; its
    stacks, written by faulthandler's own thread just past the deadline, say where it was. A
    piece that ends in time writes none."""
    script = (
        "import sys, time; from shared.campaign import session_timing as t; t.OVERRUN_SECONDS = 0.2\n"
        "with t.stacks_if_overrun(time.time() + float(sys.argv[1])):\n"
        "    time.sleep(float(sys.argv[2]))\n"
        "time.sleep(1.0)\n"
    )
    for ends_in, sleeps, dumped in ((0.0, 1.0, True), (0.5, 0.1, False)):
        proc = subprocess.run(
            [sys.executable, "-c", script, str(ends_in), str(sleeps)], cwd=ROOT, capture_output=True, text=True
        )
        assert proc.returncode == 0 and ("most recent call first" in proc.stderr) == dumped, proc.stderr


def test_a_sessions_steps_take_the_commit_its_bundle_was_made_at(tmp_path, monkeypatch):
    """The GPU machine's copy of the checkout has no .git: each step (the environment record,
    the gate, train) sees the bundle's source-commit.txt as FEDREPRO_SOURCE_COMMIT, which the
    runs' provenance reads (tests/runs/test_provenance.py); a commit set by the caller wins."""
    from shared.campaign import session as gpu_session

    sha = "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / "carry").mkdir()
    (tmp_path / "carry" / "source-commit.txt").write_text(f"{sha}-dirty\n")
    monkeypatch.delenv("FEDREPRO_SOURCE_COMMIT", raising=False)
    args = gpu_session.parser().parse_args(
        [str(tmp_path / "out"), TABLE_II, "--minutes", "1", "--device", "cpu", "--carry", str(tmp_path / "carry")]
    )
    args.out.mkdir()
    step = [sys.executable, "-c", "import os; print('source', os.environ.get('FEDREPRO_SOURCE_COMMIT'))"]
    session = gpu_session.Session(args)
    assert session.run(step, 30) == 0
    monkeypatch.setenv("FEDREPRO_SOURCE_COMMIT", "f" * 40)
    assert session.run(step, 30) == 0
    session.log.close()
    log = (args.out / "session.log").read_text()
    assert f"source {sha}-dirty" in log and f"source {'f' * 40}" in log
