"""What a GPU session leaves in OUTDIR within the limits of what comes back (--max-files,
--max-file-mib, --max-total-mib): session.log within its share (`Log`: its first lines and its
last, the middle counted), and the state's share of the rest (`state_limits`)."""

from __future__ import annotations

import collections
import math
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from shared.runs.files import write_atomically

NAMED_FILES = ("environment.json", "gate.xml", "timing.json", "session.log")  # beside the state file(s)
OTHERS_MIB = 1.0  # environment.json, gate.xml and timing.json together: tens of KiB each
LOG_SHARE = 8  # session.log takes at most this part of --max-total-mib
TAIL_SECONDS = 10  # a cut log's last lines are rewritten at most this often (and at the end)
MAX_STATE_PARTS = 100  # shared/campaign/state.py's part numbers: 00-99


@dataclass(frozen=True)
class Limits:
    log_bytes: int | None  # session.log at most (None: no limit)
    state_parts: int | None  # train's --max-parts
    part_mib: float | None  # train's --part-mib


def total_mib(args) -> float | None:
    """--max-total-mib, by default --max-files x --max-file-mib where both are given."""
    if args.max_total_mib is not None:
        return args.max_total_mib
    return args.max_files * args.max_file_mib if args.max_files and args.max_file_mib else None


def state_limits(args) -> Limits:
    """The log's share and the state's parts: of the total, session.log takes at most 1/LOG_SHARE
    (and --max-file-mib), the three other named files OTHERS_MIB, the state the rest, in files
    of at most --max-file-mib, as many as --max-files leaves; ValueError where nothing is left."""
    total = total_mib(args)
    log_mib = min(filter(None, [args.max_file_mib, total / LOG_SHARE if total else None]), default=None)
    if total is None:
        parts = args.max_files - len(NAMED_FILES) if args.max_files else None
        return Limits(int(log_mib * 2**20) if log_mib else None, parts, args.max_file_mib)
    state_mib = total - log_mib - OTHERS_MIB
    if state_mib < 0.1:
        raise ValueError(
            f"--max-total-mib {total:g}: session.log ({log_mib:g} MiB) and the other named files "
            f"({OTHERS_MIB:g} MiB) leave less than 0.1 MiB for the state"
        )
    part_mib = min(args.max_file_mib or state_mib, state_mib)
    by_files = args.max_files - len(NAMED_FILES) if args.max_files else MAX_STATE_PARTS
    return Limits(int(log_mib * 2**20), max(1, min(by_files, math.floor(state_mib / part_mib))), part_mib)


class Log:
    """session.log, each line also on stdout (`stream`: stderr for a refusal). Past `cap` bytes,
    its first half stays as written and its last lines take the second half: the file is then
    rewritten whole (atomically) every TAIL_SECONDS and at `close`, the lines between counted."""

    def __init__(self, path: Path, cap: int | None):
        self.path, self.cap = path, cap
        self.handle = open(path, "a", encoding="utf-8")
        self.head_size, self.head, self.tail, self.tail_size, self.dropped = 0, [], collections.deque(), 0, 0
        self.rewritten = 0.0
        self.lock = threading.Lock()

    def line(self, text: str, stream=None) -> None:
        text = text.rstrip("\n") + "\n"
        with self.lock:
            print(text, end="", flush=True, file=stream or sys.stdout)
            size = len(text.encode())
            half = (self.cap - 200) // 2 if self.cap is not None else None  # 200: the line saying what was cut
            if half is None or (not self.tail and self.head_size + size <= half):
                self.head_size += size
                self.head.append(text)
                self.handle.write(text)
                self.handle.flush()
                return
            self.tail.append(text)
            self.tail_size += size
            while self.tail and self.tail_size > half:
                self.tail_size -= len(self.tail.popleft().encode())
                self.dropped += 1
            if time.monotonic() - self.rewritten > TAIL_SECONDS:
                self.rewrite()

    def rewrite(self) -> None:
        """The first lines, what was left out, the last lines."""
        cut = f"... {self.dropped} lines left out: session.log keeps its first and last lines within its limit\n"
        text = "".join([*self.head, *([cut] if self.dropped else []), *self.tail])
        write_atomically(self.path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        self.rewritten = time.monotonic()

    def close(self) -> None:
        with self.lock:
            self.handle.close()
            if self.tail:
                self.rewrite()
