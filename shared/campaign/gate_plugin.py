"""The GPU session gate's pytest plugin (`pytest -p shared.campaign.gate_plugin`): what the gate
collected, each test's outcome and, for a failure, the kind of exception it raised, as JSON
lines into the file $FEDREPRO_GATE_REPORT names (shared/campaign/gate.py reads them), so that the
session's verdict follows the exception, never a test's name or text. A last line says pytest
finished; a gate cut short has none. pytest finds the hooks by their names: nothing of pytest
is imported here."""

from __future__ import annotations

import json
import os

REPORT_ENV = "FEDREPRO_GATE_REPORT"
# cudaErrorStreamCaptureUnsupported (900) ... cudaErrorStreamCaptureWrongThread (908): a CUDA
# error raised by a stream capture, wherever it surfaces (torch.AcceleratorError's error_code)
CAPTURE_ERROR_CODES = range(900, 909)
CAPTURE_MARKER = "gate_capture"  # a gate test whose assertions are about capture and replay alone


def failure_kind(exc: BaseException, about_capture: bool = False) -> str:
    """ "capture": the batched step's capture failed (shared/training/batched.py's CaptureFailed),
    a CUDA error of a stream capture, or an assertion of a test about capture and replay alone
    (`about_capture`: marked CAPTURE_MARKER; turning CUDA graphs off mends what it found);
    "numerical": another assertion failed (weights, losses or bits other than the runs alone, or
    than the same seed again); "error": anything else."""
    from shared.training.batched import CaptureFailed

    if isinstance(exc, CaptureFailed) or getattr(exc, "error_code", None) in CAPTURE_ERROR_CODES:
        return "capture"
    if isinstance(exc, AssertionError):
        return "capture" if about_capture else "numerical"
    return "error"


def write(event: dict) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as report:
            report.write(json.dumps(event) + "\n")


def pytest_collection_finish(session) -> None:
    # after -m's deselection; a method case's id as its parameter holds it (pytest escapes
    # non-ASCII characters in node ids)
    cases = {
        item.nodeid: item.callspec.params["case"]
        for item in session.items
        if isinstance(getattr(getattr(item, "callspec", None), "params", {}).get("case"), str)
    }
    write({"collected": [item.nodeid for item in session.items], "cases": cases})


def pytest_collectreport(report) -> None:
    if report.failed:  # a gate file that cannot be imported: the gate itself is broken
        write({"collection_error": report.nodeid})


def pytest_exception_interact(node, call, report) -> None:
    if call.excinfo is not None and getattr(report, "when", None) in ("setup", "call", "teardown"):
        exc = call.excinfo.value
        kind = failure_kind(exc, node.get_closest_marker(CAPTURE_MARKER) is not None)
        write({"test": node.nodeid, "when": report.when, "kind": kind, "exception": type(exc).__name__})


def pytest_runtest_logreport(report) -> None:
    # the teardown's report too: a test is done once it is torn down (a hang there is no pass)
    if report.when in ("call", "teardown") or report.outcome != "passed":
        write({"test": report.nodeid, "when": report.when, "outcome": report.outcome})


def pytest_sessionfinish(session, exitstatus) -> None:
    write({"finished": int(exitstatus)})
