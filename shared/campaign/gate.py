"""The GPU session's gate: the gpu tests on the campaign's path, at most GATE_SECONDS, before
anything trains, and the settings its verdict leaves training with.

It collects its own files only (GATE_FILES: an import error elsewhere in tests/ is none of its
business), the general CUDA-path tests first (capture and replay, determinism, TF32, class
sums, augmentation on CUDA, a group in one CUDA graph equal to its runs alone), then one case
per method of the session's targets (tests/campaign/test_gpu_campaign_methods.py takes them
from $FEDREPRO_GATE_TARGETS: each case's id names the first table and row of its method).
Its plugin (shared/campaign/gate_plugin.py) reports the exception each failure raised, and the
verdict follows it (`verdict`):

    passed      every test collected passed: the settings as given
    capture     every failure was a CUDA graph's capture: trainer.cuda_graphs=false
    numerical   an assertion failed (the batched step's weights are not the runs' alone, or a
                seed does not repeat): never batched, clients one after another (SAFEST)
    error       a test raised anything else: SAFEST
    machinery   the gate itself failed (no report, a gate file that does not import, no test
                collected, pytest's own error, its time limit): SAFEST, never no training
    not run     no CUDA device to test (a rehearsal on a CPU): the settings as given

gate.xml keeps pytest's JUnit report, or a report of no tests saying why.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
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
TARGETS_ENV = "FEDREPRO_GATE_TARGETS"  # read by tests/campaign/test_gpu_campaign_methods.py
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


def verdict(code: int | None, events: list[dict] | None) -> tuple[str, str]:
    """(verdict, why, in words) of a gate that exited with `code` (None: stopped at its time
    limit) and reported `events`."""
    if code is None:
        return "machinery", f"stopped at its time limit ({GATE_SECONDS} s) before it finished"
    if not events or not any("finished" in e for e in events):
        return "machinery", f"pytest wrote no report (exit {code})"
    broken = [e["collection_error"] for e in events if "collection_error" in e]
    if broken:
        return "machinery", f"{broken[0] or 'a gate file'} could not be collected"
    collected = [i for e in events if isinstance(e.get("collected"), list) for i in e["collected"]]
    if not collected:
        return "machinery", "no gate test was collected"
    failures = [e for e in events if "kind" in e]
    kinds = {e["kind"] for e in failures}
    if kinds == {"capture"}:
        return "capture", f"{len(failures)} failed in a CUDA graph's capture, e.g. {failures[0]['test']}"
    for kind in ("numerical", "error"):
        if kind in kinds:
            first = next(e for e in failures if e["kind"] == kind)
            return kind, f"{first['test']} raised {first['exception']}"
    if code != 0:
        return "machinery", f"pytest exited {code} with no test failed"
    return "passed", f"{len(collected)} tests"


def no_tests_report(path: Path, why: str) -> None:
    """A JUnit report of no tests, saying why (a session on a CPU has no gpu test to run)."""
    suite = ET.Element("testsuite", name="gate", tests="0", failures="0", errors="0", skipped="0")
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="not_run", value=why)
    root = ET.Element("testsuites")
    root.append(suite)
    write_atomically(path, lambda tmp: ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True))


def gate(session, cuda: bool, targets: list[str]) -> str:
    """The gate's verdict (module docstring), each collected test id and the verdict in the
    session's log; `session`: shared/campaign/session.py's Session."""
    if not cuda:
        device = session.args.device
        why = (
            f"--device {device}: no CUDA device to test, the gpu tests are not run"
            if device == "cpu"
            else "torch sees no CUDA device: the gpu tests are not run"
        )
        no_tests_report(session.written_elsewhere("gate.xml"), why)
        session.publish("gate.xml")
        session.log.line(f"gate: {why}")
        return "not run"
    events_path = session.written_elsewhere("gate.jsonl")
    events_path.unlink(missing_ok=True)
    code = session.run(
        gate_command(session.written_elsewhere("gate.xml")),
        min(GATE_SECONDS, session.left() / 3),
        # the plugins a GPU machine's image installs load in none of its seconds: the gate names its own
        env={REPORT_ENV: str(events_path), TARGETS_ENV: " ".join(targets), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    events = read_events(events_path)
    events_path.unlink(missing_ok=True)  # its lines are in the log: OUTDIR keeps gate.xml
    session.publish("gate.xml")
    for test in (i for e in events or [] if isinstance(e.get("collected"), list) for i in e["collected"]):
        session.log.line(f"gate collected {test}")
    found, why = verdict(code, events)
    if not (session.out / "gate.xml").is_file():
        no_tests_report(session.written_elsewhere("gate.xml"), why)
        session.publish("gate.xml")
    settings = " ".join(SETTINGS[found]) or "the settings as given"
    session.log.line(f"gate: {found} ({why}): training with {settings}")
    return found
