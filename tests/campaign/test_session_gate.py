"""The GPU session's gate (shared/campaign/gate.py): what it collects for a session's targets, the
verdict each kind of failure gives, through a test double for its pytest step, and the exception
kinds its pytest plugin reports from a real pytest."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

from shared.campaign import gate as session_gate
from shared.campaign.gate_plugin import REPORT_ENV
from shared.campaign.session_output import Log

ROOT = Path(__file__).resolve().parents[2]
PER_METHOD = "tests/campaign/test_gpu_campaign_methods.py::"


def plugin_events(tmp_path: Path, args: list[str], env: dict) -> list[dict]:
    """The gate plugin's events of a real pytest with `args`, from the checkout."""
    report = tmp_path / "events.jsonl"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "shared.campaign.gate_plugin", *args],
        cwd=ROOT,
        env={**os.environ, REPORT_ENV: str(report), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return session_gate.read_events(report)


def test_the_gate_collects_its_files_general_tests_first_and_the_targets_methods_only(tmp_path):
    """FedSSD Table II: the nine general CUDA-path tests, then its eight methods by their own
    ids; no FedGKD ResNet-8 case, no FedLSD."""
    events = plugin_events(
        tmp_path,
        ["--collect-only", "-m", session_gate.GATE_MARKER, *session_gate.GATE_FILES],
        {session_gate.TARGETS_ENV: "papers/fedssd/table2"},
    )
    collected = next(e["collected"] for e in events if "collected" in e)
    per_method = [i.split("[", 1)[1].rstrip("]") for i in collected if i.startswith(PER_METHOD)]
    general = [i for i in collected if not i.startswith(PER_METHOD)]
    assert collected == general + [i for i in collected if i.startswith(PER_METHOD)]  # general first
    assert len(general) == 9 and all(i.split("::")[0] in session_gate.GATE_FILES for i in general)
    assert sorted(per_method) == sorted(
        f"fedssd-table2-{m}"
        for m in ("FedAvg", "FedProx", "FedCurv", "MOON", "FedNTD", "FedCAD", "FedSSD", "FedSSD (weight M)")
    )


def test_the_plugin_reports_the_kind_of_each_failures_exception(tmp_path):
    """A capture that failed (or a CUDA error of a capture), an assertion, anything else."""
    tests = tmp_path / "test_kinds.py"
    tests.write_text(
        "from shared.training.batched import CaptureFailed\n"
        "class AcceleratorError(RuntimeError):\n"
        "    error_code = 901  # cudaErrorStreamCaptureInvalidated\n"
        "def test_capture():\n    raise CaptureFailed('operation not permitted when stream is capturing')\n"
        "def test_capture_code():\n    raise AcceleratorError('CUDA error')\n"
        "def test_numbers():\n    assert 1.0 == 1.1\n"
        "def test_other():\n    raise ValueError('a graph')\n"
        "def test_passes():\n    pass\n"
        "import pytest\n"
        "@pytest.mark.gate_capture\n"
        "def test_replay():\n    assert 1.0 == 1.1  # an assertion about capture and replay alone\n"
        "@pytest.mark.parametrize('case', ['fedgkd-table7-CIFAR-10, M=1', 'p-t-\u03b4=0.1'])\n"
        "def test_case(case):\n    pass\n"
    )
    events = plugin_events(tmp_path, [str(tests)], {})
    # a case as its parameter holds it: pytest's node id escapes the δ
    assert sorted(next(e["cases"] for e in events if "cases" in e).values()) == [
        "fedgkd-table7-CIFAR-10, M=1",
        "p-t-δ=0.1",
    ]
    torn_down = {e["test"].split("::")[1] for e in events if e.get("when") == "teardown"}
    assert torn_down == {
        "test_capture",
        "test_capture_code",
        "test_numbers",
        "test_replay",
        "test_other",
        "test_passes",
        *(t.split("::")[1] for e in events if "cases" in e for t in e["cases"]),
    }
    kinds = {e["test"].split("::")[1]: e["kind"] for e in events if "kind" in e}
    assert kinds == {
        "test_capture": "capture",
        "test_capture_code": "capture",
        "test_numbers": "numerical",
        "test_replay": "capture",
        "test_other": "error",
    }
    assert events[-1] == {"finished": 1}


class GateDouble:
    """A session whose gate step (pytest) is a double: it writes `events` as the plugin would
    and exits with `code` (None: stopped at its time limit)."""

    def __init__(self, tmp_path: Path, events: list[dict] | None, code: int | None):
        self.out, self.events, self.code = tmp_path / "out", events, code
        self.out.mkdir(parents=True)
        self.args = types.SimpleNamespace(device="cuda")
        self.log = Log(self.out / "session.log", None)
        self.commands = []

    def written_elsewhere(self, name: str) -> Path:
        return self.out / f".{name}.tmp"

    def publish(self, name: str) -> None:
        if self.written_elsewhere(name).is_file():
            self.written_elsewhere(name).replace(self.out / name)

    def left(self) -> float:
        return 600.0

    def run(self, command, seconds, stop=None, env=None) -> int | None:
        self.commands.append((command, env))
        if self.events is not None:
            Path(env[REPORT_ENV]).write_text("".join(json.dumps(e) + "\n" for e in self.events))
        return self.code


GENERAL = "tests/training/test_gpu_cuda_path.py::test_a"
FEDAVG, MOON = (f"{PER_METHOD}test_b[fedssd-table2-{row}]" for row in ("FedAvg", "MOON"))


def collected(*tests: str) -> dict:
    """The plugin's collection line: the test ids, and the case each method case's test checks."""
    return {"collected": list(tests), "cases": {t: t.split("[", 1)[1][:-1] for t in tests if "[" in t}}


COLLECTED = collected(GENERAL, FEDAVG)


def failed(kind: str, exception: str, test: str = FEDAVG) -> list[dict]:
    """A test whose call failed with an exception of this kind, then torn down."""
    return [
        {"test": test, "when": "call", "outcome": "failed"},
        {"test": test, "when": "call", "kind": kind, "exception": exception},
        {"test": test, "when": "teardown", "outcome": "passed"},
    ]


def passed(test: str) -> list[dict]:
    """A test's call and teardown, both passed: it is done."""
    return [{"test": test, "when": when, "outcome": "passed"} for when in ("call", "teardown")]


def report(*parts) -> list[dict]:
    """The plugin's lines: each part an event or a test's events."""
    return [event for part in parts for event in (part if isinstance(part, list) else [part])]


def gated(tmp_path: Path, events: list[dict] | None, code: int | None) -> tuple[session_gate.Verdict, str]:
    """The verdict of a gate that reported `events` and exited with `code`, and the session's log."""
    session = GateDouble(tmp_path, events, code)
    order = ["fedssd-table2-FedProx", "fedssd-table2-FedAvg"]
    verdict = session_gate.gate(session, cuda=True, targets=["papers/fedssd/table2"], order=order)
    command, env = session.commands[0]
    assert env[session_gate.TARGETS_ENV] == "papers/fedssd/table2" and "tests" not in command, command
    assert json.loads(env[session_gate.ORDER_ENV]) == order
    assert command[-len(session_gate.GATE_FILES) :] == list(session_gate.GATE_FILES)
    session.log.close()
    assert (session.out / "gate.xml").is_file() and not list(session.out.glob(".*"))
    return verdict, (session.out / "session.log").read_text()


def test_each_gate_failure_gives_its_verdict_and_the_settings_that_follow(tmp_path):
    """A general test's failure decides for every run; so does a failure of the gate itself."""
    graphs_off, safest = ("trainer.cuda_graphs=false",), session_gate.SAFEST
    capture = failed("capture", "CaptureFailed", GENERAL)
    unexplained = [{"test": GENERAL, "when": "call", "outcome": "failed"}, *passed(GENERAL)[1:]]
    cases = {
        "passed": (report(COLLECTED, passed(GENERAL), passed(FEDAVG), {"finished": 0}), 0, ()),
        "capture": (report(COLLECTED, capture, passed(FEDAVG), {"finished": 1}), 1, graphs_off),
        "numerical": (
            report(COLLECTED, capture, failed("numerical", "AssertionError", GENERAL), {"finished": 1}),
            1,
            ("trainer.cuda_graphs=false", "trainer.clients_per_step=1"),
        ),
        "error": (report(COLLECTED, failed("error", "ValueError", GENERAL), {"finished": 1}), 1, safest),
        "a failure of no reported kind": (report(COLLECTED, unexplained, passed(FEDAVG), {"finished": 1}), 1, safest),
        "no report": (None, 4, safest),
        "collection error": ([{"collection_error": "tests/training/test_gpu.py"}, {"finished": 2}], 2, safest),
        "no test": ([{"collected": []}, {"finished": 5}], 5, safest),
        "time limit": ([COLLECTED], None, safest),
        "time limit, no event": (None, None, safest),
        "a hang in a teardown": (report(COLLECTED, passed(GENERAL)[:1]), None, safest),
        "cut short": (report(COLLECTED, passed(GENERAL)), 1, safest),
        "pytest's error": (report(COLLECTED, passed(GENERAL), passed(FEDAVG), {"finished": 3}), 3, safest),
        "a line the plugin would not write": (report(COLLECTED, {"kind": "capture"}, {"finished": 1}), 1, safest),
    }
    for name, (events, code, settings) in cases.items():
        verdict, log = gated(tmp_path / name.replace(" ", "-").replace(",", "").replace("'", ""), events, code)
        expected = {"passed": "passed", "capture": "capture", "numerical": "numerical"}.get(name, "machinery")
        expected = "error" if name in ("error", "a failure of no reported kind") else expected
        assert verdict.overall == expected and session_gate.SETTINGS[verdict.overall] == settings, name
        assert verdict.cases == {} and verdict.clean == (name == "passed"), name
        assert verdict.settings() == [*settings, f"trainer.gate={expected}"] and verdict.settings_for() == []
        assert f"gate: {expected} (" in log and (" ".join(settings) or "the settings as given") in log, log


def test_a_python_without_pytest_is_said_in_one_line_and_trains_with_the_safest_settings(tmp_path, monkeypatch):
    """A GPU machine whose Python lacks pytest cannot test its CUDA path: the log says so, not
    that the gate wrote no report, and nothing runs pytest."""
    real = session_gate.importlib.util.find_spec
    monkeypatch.setattr(session_gate.importlib.util, "find_spec", lambda name: None if name == "pytest" else real(name))
    session = GateDouble(tmp_path, None, None)
    verdict = session_gate.gate(session, cuda=True, targets=["papers/fedssd/table2"])
    session.log.close()
    assert verdict.overall == "machinery" and not session.commands
    assert session_gate.SETTINGS[verdict.overall] == session_gate.SAFEST
    log = (session.out / "session.log").read_text()
    assert "gate: machinery (pytest is not installed for " in log and "trainer.clients_per_step=1" in log, log
    assert "pytest is not installed" in (session.out / "gate.xml").read_text()


def test_a_methods_failure_decides_for_its_methods_runs_only(tmp_path):
    """MOON's case failing its numbers sends MOON's runs to the safest settings (--set-for) and
    leaves FedAvg's as given; a case's capture failure under a general capture failure adds nothing."""
    events = report(collected(GENERAL, FEDAVG, MOON), passed(GENERAL), passed(FEDAVG))
    moon = failed("numerical", "AssertionError", MOON)
    verdict, log = gated(tmp_path / "moon", [*events, *moon, {"finished": 1}], 1)
    assert verdict.overall == "passed" and not verdict.clean
    assert verdict.cases == {"fedssd-table2-MOON": ("numerical", f"{MOON} raised AssertionError")}
    assert verdict.settings() == ["trainer.gate=passed"]
    assert verdict.settings_for() == [
        *(f"fedssd-table2-MOON:{s}" for s in session_gate.SAFEST),
        "fedssd-table2-MOON:trainer.gate=numerical",
    ]
    assert "gate: fedssd-table2-MOON: numerical (" in log and "trainer.clients_per_step=1" in log, log

    general, moon = failed("capture", "CaptureFailed", GENERAL), failed("capture", "X", MOON)
    verdict, _ = gated(tmp_path / "capture", report(events, general, moon, {"finished": 1}), 1)
    assert verdict.overall == "capture" and verdict.cases == {}


def test_a_general_test_with_a_case_parameter_of_its_own_decides_for_every_run(tmp_path):
    """tests/training/test_gpu_cuda_path.py's tests take a `case` too: only the method cases'
    file's tests are method cases."""
    general = "tests/training/test_gpu_cuda_path.py::test_seed[fedgkd-batched-graphs]"
    events = report(
        {"collected": [general, FEDAVG], "cases": {general: "fedgkd-batched-graphs", FEDAVG: "fedssd-table2-FedAvg"}},
        failed("numerical", "AssertionError", general),
        passed(FEDAVG),
        {"finished": 1},
    )
    verdict, _ = gated(tmp_path, events, 1)
    assert verdict.overall == "numerical" and verdict.cases == {}


def test_a_gate_cut_by_its_time_limit_keeps_what_passed_before(tmp_path):
    """The general tests and FedAvg's case done, MOON's running (or hanging in its teardown):
    FedAvg trains as given, MOON (untested) with the safest settings; the general tests
    unfinished: every run safest."""
    events = report(collected(GENERAL, FEDAVG, MOON), passed(GENERAL), passed(FEDAVG))
    for cut in ([], passed(MOON)[:1]):
        verdict, log = gated(tmp_path / f"moon{len(cut)}", [*events, *cut], None)
        assert verdict.overall == "passed"
        assert list(verdict.cases) == ["fedssd-table2-MOON"] and verdict.cases["fedssd-table2-MOON"][0] == "machinery"
        assert "stopped at its time limit (90 s) before it was tested" in log, log
    verdict, _ = gated(tmp_path / "general", [collected(GENERAL, FEDAVG, MOON)], None)
    assert verdict.overall == "machinery" and f"before {GENERAL} finished" in verdict.why
