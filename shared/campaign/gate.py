"""The GPU session's gate: the gpu tests on the campaign's path, at most GATE_SECONDS, before
anything trains, and the settings its verdict leaves training with.

It collects its own files only (GATE_FILES: an import error elsewhere in tests/ is none of its
business), the general CUDA-path tests first (capture and replay, determinism, TF32, class
sums, augmentation on CUDA, a group in one CUDA graph equal to its runs alone), then one case
per method of the session's targets (tests/campaign/test_gpu_campaign_methods.py takes them
from $FEDREPRO_GATE_TARGETS: each case's id names the first table and row of its method).
Its plugin (shared/campaign/gate_plugin.py) reports the exception each failure raised, and the
verdict follows it (`verdict`):

    passed      every test passed (or was skipped): the settings as given
    capture     every failure was a CUDA graph's capture, or an assertion of a test about capture
                and replay alone (marked gate_capture): trainer.cuda_graphs=false
    numerical   an assertion failed (the batched step's weights are not the runs' alone, or a
                seed does not repeat): never batched, clients one after another (SAFEST)
    error       a test raised anything else: SAFEST
    machinery   the gate itself failed (no report, a gate file that does not import, no test
                collected, pytest's own error, its time limit before the general tests
                finished, a Python without pytest): SAFEST, never no training
    not run     no CUDA device to test (a rehearsal on a CPU): the settings as given

The general tests' failures decide for every run. A method case's decide for its method's runs
only (shared/campaign/gate_cases.py: `campaign train --set-for`), where they ask for more than
the general tests': a MOON that fails its case trains one client after another, FedAvg as
before. A case the time limit left untested is `machinery` for its method; those that passed
before it keep their verdict.

gate.xml keeps pytest's JUnit report, or a report of no tests saying why.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from shared.campaign.gate_plugin import REPORT_ENV
from shared.runs.files import write_atomically

GATE_SECONDS = 90
GATE_MARKER = "gpu and gate"
GATE_FILES = (  # in the order they run: the general CUDA-path tests first
    "tests/training/test_gpu_cuda_path.py",
    "tests/training/test_gpu.py",
    "tests/campaign/test_gpu_campaign_methods.py",
)
CASES = f"{GATE_FILES[-1]}::"  # the method cases' tests: one a method, its `case` parameter the case
TARGETS_ENV = "FEDREPRO_GATE_TARGETS"  # read by tests/campaign/test_gpu_campaign_methods.py
ORDER_ENV = "FEDREPRO_GATE_ORDER"  # its method cases' names as JSON, those the session trains first first
GRAPHS_OFF = ("trainer.cuda_graphs=false",)
SAFEST = (*GRAPHS_OFF, "trainer.clients_per_step=1")
SETTINGS = {
    "passed": (),
    "not run": (),
    "capture": GRAPHS_OFF,
    "numerical": SAFEST,
    "error": SAFEST,
    "machinery": SAFEST,
}


def gate_command(junit: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        GATE_MARKER,
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "shared.campaign.gate_plugin",
        f"--junitxml={junit}",
        *GATE_FILES,
    ]


def read_events(path: Path) -> list[dict] | None:
    """The plugin's JSON lines (None: it wrote none); a line that does not read is left out."""
    if not path.is_file():
        return None
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


@dataclass(frozen=True)
class Verdict:
    """The gate's verdict on the CUDA path (`overall`: the general tests' and the gate's own) and,
    for a method whose case found worse, its case's (`cases`: case -> (verdict, why))."""

    overall: str
    why: str
    cases: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return self.overall in ("passed", "not run") and not self.cases

    def settings(self) -> list[str]:
        """`campaign train`'s --set: the overall verdict's settings, and the verdict recorded."""
        return [*SETTINGS[self.overall], f"trainer.gate={self.overall}"]

    def settings_for(self) -> list[str]:
        """`campaign train`'s --set-for: each case's settings for its method's runs (gate_cases.py)."""
        return [
            f"{case}:{setting}"
            for case, (found, _) in self.cases.items()
            for setting in (*SETTINGS[found], f"trainer.gate={found}")
        ]


def worst(failures: list[dict]) -> tuple[str, str] | None:
    """(verdict, why) of these tests' failures (None: none failed)."""
    if not failures:
        return None
    kinds = {e["kind"] for e in failures}
    if kinds == {"capture"}:
        return "capture", f"{len(failures)} failed in a CUDA graph's capture, e.g. {failures[0]['test']}"
    first = next(e for kind in ("numerical", "error") for e in failures if e["kind"] == kind)
    return first["kind"], f"{first['test']} raised {first['exception']}"


def failures_of(events: list[dict]) -> list[dict]:
    """Each failure with its kind; a test reported failed with no kind (the plugin cut short
    between its two lines, a strict xfail that passed) is an error."""
    kinds = [
        {**e, "kind": e["kind"] if e["kind"] in ("capture", "numerical") else "error"} for e in events if "kind" in e
    ]
    explained = {e["test"] for e in kinds}
    unexplained = {e["test"] for e in events if e.get("outcome") == "failed"} - explained
    return kinds + [
        {"test": t, "kind": "error", "exception": "a failure of no reported kind"} for t in sorted(unexplained)
    ]


def machinery_fault(code: int | None, events: list[dict] | None) -> str | None:
    """Why the gate itself failed (None: it ran its tests, maybe not all of them in its time)."""
    no_report = f"pytest wrote no report (exit {code})"
    if not events:
        return f"stopped at its time limit ({GATE_SECONDS} s) before it finished" if code is None else no_report
    if code is not None and not any("finished" in e for e in events):
        return no_report
    broken = [e["collection_error"] for e in events if "collection_error" in e]
    if broken:
        return f"{broken[0] or 'a gate file'} could not be collected"
    if not any(e.get("collected") for e in events if isinstance(e.get("collected"), list)):
        return "no gate test was collected"
    return None


def verdict(code: int | None, events: list[dict] | None) -> Verdict:
    """The verdict of a gate that exited with `code` (None: stopped at its time limit) and
    reported `events` (module docstring); a report the plugin would not write: machinery."""
    try:
        return read_verdict(code, events)
    except (KeyError, TypeError, AttributeError, StopIteration):
        return Verdict("machinery", "its report is not what the gate's plugin writes")


def read_verdict(code: int | None, events: list[dict] | None) -> Verdict:
    """The general tests' failures decide for every run, each method case's for its method's
    runs where worse; a test is done once torn down, and a case not done is machinery's."""
    fault = machinery_fault(code, events)
    if fault:
        return Verdict("machinery", fault)
    collected = [i for e in events if isinstance(e.get("collected"), list) for i in e["collected"]]
    case_of = {  # the method cases' file only: a general test may have a `case` parameter of its own
        t: c for e in events for t, c in e.get("cases", {}).items() if t in collected and t.startswith(CASES)
    }
    failures, done = failures_of(events), {e["test"] for e in events if e.get("when") == "teardown"}
    stopped = f"stopped at its time limit ({GATE_SECONDS} s)" if code is None else f"pytest exited {code}"
    unfinished = [t for t in collected if t not in case_of and t not in done]
    if unfinished:
        return Verdict("machinery", f"{stopped} before {unfinished[0]} finished")
    if not failures and code not in (0, None):
        return Verdict("machinery", f"pytest exited {code} with no test failed")
    overall, why = worst([e for e in failures if e["test"] not in case_of]) or ("passed", f"{len(collected)} tests")
    cases = {}
    for case in dict.fromkeys(case_of.values()):
        tests = [t for t, c in case_of.items() if c == case]
        found = worst([e for e in failures if e["test"] in tests])
        if found is None:
            found = (
                ("passed", "") if all(t in done for t in tests) else ("machinery", f"{stopped} before it was tested")
            )
        if set(SETTINGS[found[0]]) > set(SETTINGS[overall]):
            cases[case] = found
    if cases and overall == "passed":
        why = f"the {len(collected) - len(case_of)} general tests"
    return Verdict(overall, why, cases)


def no_tests_report(path: Path, why: str) -> None:
    """A JUnit report of no tests, saying why (a session on a CPU has no gpu test to run)."""
    suite = ET.Element("testsuite", name="gate", tests="0", failures="0", errors="0", skipped="0")
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="not_run", value=why)
    root = ET.Element("testsuites")
    root.append(suite)
    write_atomically(path, lambda tmp: ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True))


def gate(session, cuda: bool, targets: list[str], order: list[str] = ()) -> Verdict:
    """The gate's verdict (module docstring), each collected test id and the verdicts in the
    session's log; `session`: shared/campaign/session.py's Session; `order`: the method cases'
    names, those the session trains first first (shared/campaign/gate_cases.py `cases_in_turn`)."""
    if not cuda:
        device = session.args.device
        why = (
            f"--device {device}: no CUDA device to test, the gpu tests are not run"
            if device == "cpu"
            else "torch sees no CUDA device: the gpu tests are not run"
        )
        found = untested(session, Verdict("not run", why))
    elif importlib.util.find_spec("pytest") is None:  # said as such, not as a gate that wrote no report
        found = untested(session, Verdict("machinery", f"pytest is not installed for {sys.executable}"))
    else:
        found = tested(session, targets, order)
        if not (session.out / "gate.xml").is_file():
            untested(session, found)
    settings = " ".join(SETTINGS[found.overall]) or "the settings as given"
    session.log.line(
        f"gate: {found.why}" if not cuda else f"gate: {found.overall} ({found.why}): training with {settings}"
    )
    for case, (case_verdict, why) in found.cases.items():
        session.log.line(
            f"gate: {case}: {case_verdict} ({why}): its method's runs train with {' '.join(SETTINGS[case_verdict])}"
        )
    return found


def untested(session, found: Verdict) -> Verdict:
    """`found`, with gate.xml a report of no tests saying why."""
    no_tests_report(session.written_elsewhere("gate.xml"), found.why)
    session.publish("gate.xml")
    return found


def tested(session, targets: list[str], order: list[str]) -> Verdict:
    """The gate's tests run in a pytest of their own, at most GATE_SECONDS, and their verdict."""
    events_path = session.written_elsewhere("gate.jsonl")
    events_path.unlink(missing_ok=True)
    code = session.run(
        gate_command(session.written_elsewhere("gate.xml")),
        min(GATE_SECONDS, session.left() / 3),
        # the plugins a GPU machine's image installs load in none of its seconds: the gate names its own
        env={
            REPORT_ENV: str(events_path),
            TARGETS_ENV: " ".join(targets),
            ORDER_ENV: json.dumps(list(order)),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        },
    )
    events = read_events(events_path)
    events_path.unlink(missing_ok=True)  # its lines are in the log: OUTDIR keeps gate.xml
    session.publish("gate.xml")
    for test in (i for e in events or [] if isinstance(e.get("collected"), list) for i in e["collected"]):
        session.log.line(f"gate collected {test}")
    return verdict(code, events)
