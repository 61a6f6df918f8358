"""The one format runs travel in between machines, its one writer and its one reader.

A transfer file is a tar (gzip-compressed where its name ends in .gz or .tgz), whole or split
into parts `<name>.part-00`, `-01`, ... read one after another, whose last member is
manifest.json:

    {"format": "fedrepro-runs/2", "kind": "archive" | "campaign",
     <the kind's own keys>, "members": [{"path", "sha256", "size"}, ...], "written_at": ISO time}

`python -m shared.archive pack` writes kind "archive" (members `runs/<id>/<file>`), a
campaign's state (shared/campaign/state.py) kind "campaign" (`finished/<id>/<file>`,
`progress/<id>/<file>`). Each kind (`Kind`: shared.archive, shared/campaign/state_reading.py)
says which member names it holds, how large each may be (a checkpoint or model.pt: what its
run's model needs) and checks its own keys; this module does the rest, for both, and is the
only code that opens such a file (shared/runs/tar_reading.py parses its headers).

Files of earlier versions are read too (LEGACY): "fedrepro-runs/1", the archives of
`pack` (no kind, packed_at for written_at, which hand-made ones lack), and
"fedrepro-campaign/1", the campaign's state files (no kind). A manifest of another format is
refused in one line naming the formats this version reads.

Reading checks, in one pass, before anything is used (each refusal a `TransferError`, one line):
every part a regular file; the stream expanding to at most EXPANSION_FLOOR + EXPANSION_RATIO
times its size; each member a regular file its kind holds, once, within its limit and what is
left of that budget, refused at its header before a byte of it is read; the manifest's keys,
each of its type; exactly its members, each of its SHA-256 and size. Memory is bounded by the
input: a binary member (a checkpoint, model.pt, a per-client state) over IN_MEMORY_BYTES is
streamed while hashed into a pid-owned folder (`Staging`) beside where it goes and handed on
as a `Staged` path; text members, within their limits, are read as bytes.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gzip
import hashlib
import io
import itertools
import json
import os
import re
import shutil
import tarfile
import time
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Callable

from shared.runs.files import (
    RunFilesError,
    add_member,
    megabytes,
    remove_dead_temporaries,
    sha256,
    temporary_path,
    write_atomically,
)
from shared.runs.strict_text import strict_json
from shared.runs.tar_reading import CHUNK, TarRefused, TarStream, decompressed, open_regular

FORMAT = "fedrepro-runs/2"
# An earlier version's format -> the kind its files are, and the keys its manifests hold beside the kind's
LEGACY = {"fedrepro-runs/1": "archive", "fedrepro-campaign/1": "campaign"}
READ_FORMATS = (FORMAT, *LEGACY)
COMMON = {
    FORMAT: ({"format", "kind", "members", "written_at"}, set()),
    "fedrepro-runs/1": ({"format", "members"}, {"packed_at"}),
    "fedrepro-campaign/1": ({"format", "members", "written_at"}, set()),
}
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 8 * 2**20  # some 130 bytes a member: 60,000 members; parsed whole
# What a file may expand to: checkpoints barely compress and a run's text some 5 to 20 times,
# while gzip reaches 1000 times on a crafted stream
EXPANSION_FLOOR = 64 * 2**20
EXPANSION_RATIO = 100
IN_MEMORY_BYTES = 2**20  # a binary member larger than this is staged on disk, never held in memory
MAX_PARTS = 100  # part-00 to part-99
# written_at (and an archive's packed_at) as `write_transfer` and the earlier writers wrote it:
# datetime.now(timezone.utc).isoformat(timespec="seconds" or "microseconds"); ASCII digits only
WRITTEN_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{6})?\+00:00")
CLOCK_SKEW = timedelta(days=1)  # how far ahead another machine's clock may be


class TransferError(RunFilesError):
    """A transfer file refused; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Kind:
    """What one kind of transfer file holds, for the reader (and its messages)."""

    name: str  # the manifest's "kind"
    what: str  # "an archive of runs", for messages
    reader: str  # the command that reads it
    noun: str  # what a member is: "a run's file"
    member_problem: Callable[[str], str | None]  # why a name is no member of the kind (None: it is one)
    max_size: Callable[[str], int]  # the most a member of this name may hold, whatever its run
    # the most a member may hold given the members read before it (a checkpoint: its run's model)
    # and a dict of this read, where the kind keeps what it works out once a run (time bounded by the input)
    member_limit: Callable[[str, dict, dict], int]
    keys: tuple[frozenset, frozenset]  # the kind's own keys: required, optional
    keys_problem: Callable[[dict], str | None]  # why its own keys' values are not of their types
    binary: Callable[[str], bool]  # staged on disk when over IN_MEMORY_BYTES


@dataclasses.dataclass(frozen=True, eq=False)
class Staged:
    """A member streamed to disk while hashed (its SHA-256 and size verified); equal to another
    member, staged or bytes, of the same content."""

    path: Path
    size: int
    sha256: str

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other) -> bool:
        if isinstance(other, (bytes, bytearray)):
            return len(other) == self.size and sha256(bytes(other)) == self.sha256
        return isinstance(other, Staged) and (other.size, other.sha256) == (self.size, self.sha256)

    __hash__ = None

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()


Content = bytes | Staged


def member_file(content: Content):
    """A member's content as an open binary file: in memory, or its staged file."""
    return io.BytesIO(content) if isinstance(content, (bytes, bytearray)) else open(content.path, "rb")


def install(dest: Path, content: Content, move: bool = False) -> None:
    """A member's content written atomically at `dest`: its bytes, or its staged file copied
    (moved, where `move` and on the same filesystem) in chunks."""
    if isinstance(content, (bytes, bytearray)):
        write_atomically(dest, lambda tmp: tmp.write_bytes(content))
        return
    if move:
        with contextlib.suppress(OSError):
            os.replace(content.path, dest)
            return
    write_atomically(dest, lambda tmp: shutil.copyfile(content.path, tmp))


class Staging:
    """A folder of this process beside a destination (`.incoming-<n>.<pid>.tmp`, made on the
    first staged member: a killed reader's is removed by the next), removed with the folders
    made for it when the read fails, when `remove` is called, or when the process exits."""

    numbers = itertools.count()

    def __init__(self, beside: Path):
        self.beside, self.folder, self.made, self.count = Path(beside), None, [], 0

    def stage(self, chunks, size: int) -> Staged:
        if self.folder is None:
            missing = self.beside
            while not missing.exists():
                self.made.insert(0, missing)
                missing = missing.parent
            self.beside.mkdir(parents=True, exist_ok=True)
            remove_dead_temporaries(self.beside, prefix="incoming-")
            self.folder = temporary_path(self.beside / f"incoming-{next(Staging.numbers)}")
            self.folder.mkdir()
            atexit.register(self.remove)
        self.count += 1
        path, digest, written = self.folder / f"{self.count}", hashlib.sha256(), 0
        with open(path, "xb") as sink:
            for chunk in chunks:
                digest.update(chunk)
                sink.write(chunk)
                written += len(chunk)
        return Staged(path, written, digest.hexdigest())

    def remove(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        for folder in reversed(self.made):  # the deepest first; only where nothing else came in
            with contextlib.suppress(OSError):
                folder.rmdir()
        self.folder, self.made = None, []


# --- reading ------------------------------------------------------------------------------------


def part_paths(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.part-[0-9][0-9]"))


def read_transfer(path: Path, kind: Kind, parts: list[Path] | None = None, stage: Path | Staging | None = None):
    """(manifest, members) of the transfer file at `path` (or its `parts`), checked as the
    module's docstring says; large binary members staged beside `stage` (a folder, or a
    `Staging` the caller removes; None: beside `path`). The manifest is in this version's
    layout, whatever version wrote it (`check_manifest`)."""
    staging = stage if isinstance(stage, Staging) else Staging(Path(path).parent if stage is None else stage)
    try:
        manifest, members = read_parts(Path(path), parts or [Path(path)], kind, staging)
        manifest = check_manifest(path, manifest, kind)
        check_listed(path, manifest, members)
    except BaseException:
        staging.remove()
        raise
    return manifest, members


def read_parts(path: Path, parts: list[Path], kind: Kind, staging: Staging):
    files = []
    numbers = [part.name.rpartition(".part-")[2] for part in parts if ".part-" in part.name]
    if numbers != [f"{i:02d}" for i in range(len(numbers))]:  # a lost part whose neighbours still join
        raise TransferError(f"cannot read {path}: its parts are numbered {', '.join(numbers)}, not 00 on without a gap")
    try:
        try:
            for part in parts:
                files.append(open_regular(part))
        except TarRefused as exc:
            raise TransferError(f"cannot read {path}: {exc}") from None
        size = sum(os.fstat(f.fileno()).st_size for f in files)
        limit = EXPANSION_FLOOR + EXPANSION_RATIO * size
        refusal = (
            f"{path}: expands to more than {megabytes(limit)} (a damaged or hostile file: a real one "
            f"holds at most {EXPANSION_RATIO} times its size)"
        )
        return read_members(path, decompressed(files, limit, refusal), limit, kind, staging)
    except (EOFError, OSError, zlib.error) as exc:  # zlib: a damaged stream
        raise TransferError(f"cannot read {path}: {' '.join(str(exc).split()) or type(exc).__name__}") from None
    except TarRefused as exc:
        raise TransferError(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}") from None
    finally:
        for f in files:
            f.close()


def read_members(path: Path, stream, budget: int, kind: Kind, staging: Staging) -> tuple[object, dict[str, Content]]:
    """Every member of the tar stream, its header checked before its data is read, and the
    manifest (parsed)."""
    members, manifest, left, tar, cache = {}, None, budget, TarStream(stream), {}
    while (member := tar.next()) is not None:
        name = member.name
        why = None if name == MANIFEST else kind.member_problem(name)
        if why is None and not member.isfile():
            why = (
                f"is a link ({member.kind}), not a regular file"
                if member.islink()
                else f"is a {member.kind}, not a regular file"
            )
        if why is None and (name in members or (name == MANIFEST and manifest is not None)):
            why = "appears twice"
        if why is None:  # the name is one of the kind's: its limit (a kind's limit may rely on its name's form)
            limit = min(MAX_MANIFEST_BYTES if name == MANIFEST else kind.member_limit(name, members, cache), left)
            if member.size > limit:
                why = f"holds {megabytes(member.size)}, over the limit of {megabytes(limit)}"
        if why:
            raise TransferError(f"{path}: member {name[:120]!r} {why}")
        left -= member.size
        if name == MANIFEST:
            manifest = parse_json(path, b"".join(tar.chunks()))
        elif kind.binary(name) and member.size > IN_MEMORY_BYTES:
            members[name] = staging.stage(tar.chunks(), member.size)
        else:
            members[name] = b"".join(tar.chunks())  # at most its limit, checked above
    if manifest is None:
        raise TransferError(f"{path} has no {MANIFEST}; it is no file of runs this project writes")
    return manifest, members


def parse_json(path: Path, content: bytes):
    try:
        return strict_json(content)
    except (ValueError, RecursionError) as exc:  # ValueError: not JSON, not UTF-8; RecursionError: nested too deep
        raise TransferError(f"{path}: its {MANIFEST} is not JSON ({type(exc).__name__})") from None


def check_manifest(path: Path, manifest, kind: Kind) -> dict:
    """The manifest's common keys and the kind's, each of its type; returned in this version's
    layout (an earlier version's given its kind, and written_at from packed_at where it has one)."""
    form = manifest.get("format") if isinstance(manifest, dict) else None
    if not isinstance(form, str) or form not in READ_FORMATS:
        raise TransferError(
            f"{path}: its manifest is of format {str(form)[:40]!r}, which this version does not read; "
            f"it reads {', '.join(READ_FORMATS)}"
        )
    found = manifest.get("kind") if form == FORMAT else LEGACY[form]
    if found != kind.name:
        what = {"archive": "an archive of runs", "campaign": "a campaign state"}.get(
            found if isinstance(found, str) else ""
        )
        raise TransferError(
            f"{path} is {what or 'of kind ' + repr(str(found)[:40])}, not {kind.what}; {kind.reader} reads {kind.what}"
        )
    required, optional = COMMON[form]
    problem = (
        keys_problem(manifest, required | kind.keys[0], optional | kind.keys[1])
        or entries_problem(manifest["members"], kind)
        or written_at_problem(manifest.get("written_at", manifest.get("packed_at", "2000-01-01T00:00:00+00:00")))
        or kind.keys_problem(manifest)
    )
    if problem:
        raise TransferError(f"{path}: its manifest {problem}")
    current = {key: value for key, value in manifest.items() if key != "packed_at"}
    current.update(format=FORMAT, kind=kind.name)
    if "packed_at" in manifest:
        current["written_at"] = manifest["packed_at"]
    return current


def keys_problem(mapping: dict, required: set[str], optional: set[str] = frozenset()) -> str | None:
    missing, unknown = sorted(required - set(mapping)), sorted(set(mapping) - required - optional)
    if missing:
        return f"lacks {', '.join(missing)}"
    return f"holds unknown keys {', '.join(repr(k[:40]) for k in unknown[:3])}" if unknown else None


def entries_problem(entries, kind: Kind) -> str | None:
    if not isinstance(entries, list):
        return "members is not a list"
    for entry in entries:
        if not isinstance(entry, dict) or keys_problem(entry, {"path", "sha256", "size"}):
            return "lists a member that is not a mapping of path, sha256 and size"
        path = entry["path"]
        if not isinstance(path, str) or path == MANIFEST or kind.member_problem(path):
            return f"lists {str(path)[:120]!r}, which is not {kind.noun}"
        if not isinstance(entry["sha256"], str) or not is_sha256(entry["sha256"]):
            return f"lists {path!r} without a SHA-256"
        if type(entry["size"]) is not int or not 0 <= entry["size"] <= kind.max_size(path):
            return f"lists {path!r} without a size within its limit"
    paths = [entry["path"] for entry in entries]
    return "lists a member twice" if len(set(paths)) < len(paths) else None


def is_sha256(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def written_at_problem(written_at, now: datetime | None = None) -> str | None:
    """A time as the writers write it (`WRITTEN_AT`: UTC, isoformat to the second or the
    microsecond), a real date, no later than now and CLOCK_SKEW (a time in the future would
    win over every state written here): two files' times compare."""
    if not isinstance(written_at, str) or not WRITTEN_AT.fullmatch(written_at):
        return "has no written_at as this project writes it (UTC, ISO 8601: 2025-01-01T12:00:00+00:00)"
    try:
        when = datetime.fromisoformat(written_at)
    except ValueError:
        return "has a written_at that is no date (ISO 8601, as written: 2025-01-01T12:00:00+00:00)"
    if when > (now or datetime.now(timezone.utc)) + CLOCK_SKEW:
        return f"has a written_at later than now (by more than {CLOCK_SKEW.days} day: forged, or a wrong clock)"
    return None


def content_digest(content: Content) -> tuple[str, int]:
    return (content.sha256, content.size) if isinstance(content, Staged) else (sha256(content), len(content))


def check_listed(path: Path, manifest: dict, members: dict[str, Content]) -> None:
    """The manifest lists exactly the members, each with its SHA-256 and size."""
    listed = {m["path"]: (m["sha256"], m["size"]) for m in manifest["members"]}
    for name, content in members.items():
        if name not in listed:
            raise TransferError(f"{path}: member {name!r} is not in the manifest")
        digest, size = content_digest(content)
        if (digest, size) != listed[name]:
            raise TransferError(
                f"{path}: member {name!r} fails its checksum (manifest: sha256 {listed[name][0][:12]}..., "
                f"{listed[name][1]} bytes; file: sha256 {digest[:12]}..., {size} bytes)"
            )
    absent = sorted(set(listed) - set(members))
    if absent:
        raise TransferError(f"{path}: the manifest lists {absent[0]!r}, which the file lacks ({len(absent)} such)")


def is_outside(name: str) -> str | None:
    """Why a member's name could write outside its folder (None: it cannot)."""
    path = PurePosixPath(name)
    if path.is_absolute() or name[1:2] == ":" or name.startswith("\\"):
        return "has an absolute path"
    if ".." in path.parts or ".." in name.split("\\"):
        return "points outside the file's folder (..)"
    return None


# --- writing ------------------------------------------------------------------------------------

TAR_END = 12 * 1024  # at most what a file's end adds: tar's two blocks and a record's padding, gzip's trailer


def member_bound(sizes: list[int]) -> int:
    """At most the bytes that members of these sizes add to a transfer file: each its data,
    tar's header (and a pax header), padding, and deflate's worst case on data it cannot
    compress (zlib's deflateBound: 0.03%; checkpoints barely compress) and a flush."""
    return sum(size + size // 1024 + 3072 for size in sizes)


@dataclasses.dataclass(frozen=True)
class Wrote:
    """What `write_transfer` wrote: its manifest, the file's bytes after each group of members
    (None: a group left out) and the file's bytes."""

    manifest: dict
    sizes: list
    size: int


def write_transfer(
    out: Path,
    kind: str,
    groups: list[list[tuple[str, bytes, float]]],
    about: dict,
    admit: Callable[[int, list, int], bool] = lambda index, group, size: True,
) -> Wrote:
    """The transfer file at `out`, under a temporary name of this process then renamed (a
    reader never sees half a file): its members in `groups` (name, bytes, mtime), each group
    written where `admit(index, group, bytes so far with the most the manifest and the end
    add)` allows; then the manifest of what was written: format, kind, `about` (the kind's own
    keys), members, written_at. The stream is flushed after each group, so sizes are exact."""
    entries = {name: {"path": name, "sha256": sha256(data), "size": len(data)} for g in groups for name, data, _ in g}

    def manifest(kept):
        return {
            "format": FORMAT,
            "kind": kind,
            **about,
            "members": [entries[name] for name, _, _ in kept],
            "written_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        }

    everything = [file for group in groups for file in group]
    reserve = member_bound([len(json.dumps(manifest(everything), indent=1))]) + TAR_END  # no shorter
    tmp, kept, sizes = temporary_path(out, f".{out.name}.{os.getpid()}.tmp"), [], []
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(tmp, "wb") as raw, compressing(out, raw) as stream:
            with tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for index, group in enumerate(groups):
                    if not admit(index, group, raw.tell() + reserve):
                        sizes.append(None)
                        continue
                    for name, data, mtime in group:
                        add_member(tar, name, data, mtime)
                    kept += group
                    stream.flush()
                    sizes.append(raw.tell())
                written = manifest(kept)
                add_member(tar, MANIFEST, json.dumps(written, indent=1).encode(), time.time())
        size = tmp.stat().st_size
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return Wrote(written, sizes, size)


def compressing(out: Path, raw):
    return gzip.GzipFile(fileobj=raw, mode="wb") if out.name.endswith((".gz", ".tgz")) else contextlib.nullcontext(raw)


def write_parts(path: Path, limit: int) -> int:
    """The file at `path` split into parts of `limit` bytes (`<name>.part-NN`), each written
    atomically, read in chunks; returns their number. The caller removes the whole file."""
    size, count = path.stat().st_size, 0
    with open(path, "rb") as whole:
        for start in range(0, size, limit):

            def copy(tmp, start=start):
                whole.seek(start)
                with open(tmp, "wb") as part:
                    left = min(limit, size - start)
                    while left:
                        chunk = whole.read(min(CHUNK, left))
                        if not chunk:
                            raise TransferError(f"{path} shrank while it was split")
                        part.write(chunk)
                        left -= len(chunk)

            write_atomically(path.with_name(f"{path.name}.part-{count:02d}"), copy)
            count += 1
    return count
