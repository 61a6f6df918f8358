"""The parser of the tar files runs travel in (shared/runs/transfer.py, their one reader, opens
them: archives and a campaign's state files): the 512-byte headers parsed here, never by the
standard library's tarfile, the members streamed in chunks, memory and time bounded by the input.

Python 3.11.7's tarfile parses a pax header in time and memory far beyond its size
(CVE-2024-6232: a 1.4 kB file took 18 GB). The writers here (tarfile's PAX format, as
`add_member` uses it) write ustar headers, and a pax header only for a name longer than 100
characters: a few hundred bytes. So a header is refused in one line, before its data is read,
where it is:

- not a ustar header of a valid checksum and an octal size (base-256 sizes are refused);
- a pax header over MAX_PAX_BYTES, a global pax header, or a GNU long name or link;
- a pax record other than a path, a size or a time, or records that do not parse exactly.

Links, directories and devices are yielded as members of that kind: their readers refuse them
by name. A stream (gzip or plain, whole or in parts) is read through `Bounded`: a decompression
bomb stops at its limit, whatever its headers claim. It is read to its end: after the tar's
end block only the zero bytes of its padding (MAX_END_BYTES), so that gzip checks its CRC-32
and length, and a hidden member, a second gzip member (an empty one too) or garbage is refused.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import zlib
from pathlib import Path

from shared.runs.files import RunFilesError

BLOCK = 512
CHUNK = 2**20
RECORD = 20 * BLOCK  # tar's record: a writer pads its two end blocks up to one (tarfile, GNU tar)
# What may follow the first end block: the second, and the record's padding, zero bytes all
MAX_END_BYTES = RECORD + 2 * BLOCK
MAX_PAX_BYTES = 4096  # a path of a few hundred characters, with room to spare
PAX_KEYS = ("path", "size", "mtime", "atime", "ctime")  # what tarfile's PAX writer writes for a run's file
REGULAR = (b"0", b"\x00")
PAX = b"x"
KINDS = {b"1": "hard link", b"2": "symbolic link", b"3": "device", b"4": "device", b"5": "directory", b"6": "FIFO"}
REFUSED = {b"g": "a global pax header", b"L": "a GNU long name", b"K": "a GNU long link name"}
# A number in a header: ASCII digits only (str.isdigit() and int() take other scripts' digits, '²'
# among them, which int() then refuses), short enough to parse at once
DECIMAL, PAX_LENGTH = re.compile(r"[0-9]{1,20}"), re.compile(rb"[0-9]{1,7}")


class TarRefused(RunFilesError):
    """A tar stream refused before anything of it is used; one line."""


@dataclasses.dataclass(frozen=True)
class Member:
    name: str
    size: int
    kind: str  # "file", or what else its header says it is ("symbolic link", ...)

    def isfile(self) -> bool:
        return self.kind == "file"

    def islink(self) -> bool:
        return self.kind.endswith("link")


class Bounded:
    """A stream that refuses to yield more than `limit` bytes in all."""

    def __init__(self, source, limit: int, refusal: str):
        self.source, self.limit, self.refusal, self.count = source, limit, refusal, 0

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(CHUNK if size is None or size < 0 else size)
        self.count += len(data)
        if self.count > self.limit:
            raise TarRefused(self.refusal)
        return data


class Chained:
    """The bytes of several open files, one after another, with bytes read ahead given back first."""

    def __init__(self, files: list, ahead: bytes = b""):
        self.files, self.ahead = list(files), ahead

    def read(self, size: int = -1) -> bytes:
        out, self.ahead = (self.ahead, b"") if size < 0 else (self.ahead[:size], self.ahead[size:])
        while self.files and (size < 0 or len(out) < size):
            data = self.files[0].read(-1 if size < 0 else size - len(out))
            if not data:
                self.files.pop(0)
            out += data
        return out


def open_regular(part: Path):
    """The part opened for reading if it is a regular file; a link (even to one), a device or a
    FIFO is refused without being opened (or, swapped in meanwhile, read)."""
    try:
        if not stat.S_ISREG(os.lstat(part).st_mode):
            raise TarRefused(f"{part} is not a regular file (a link, a device or a FIFO); it is read only as one")
        fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise TarRefused(f"cannot open {part}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TarRefused(f"{part} is not a regular file (a link, a device or a FIFO)")
    return os.fdopen(fd, "rb")


class Gunzipped:
    """One gzip member of `source`, inflated at most CHUNK bytes at a time; zlib checks its
    trailer (CRC-32 and length). Its end is the stream's: a second member (an empty one too,
    whose header fields hold any bytes) or anything else after it is refused, and a stream cut
    short raises EOFError, as gzip's reader does."""

    def __init__(self, source):
        self.source, self.inflate = source, zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self.pending, self.inflated, self.at = b"", b"", 0

    def read(self, size: int = -1) -> bytes:
        size = CHUNK if size is None or size < 0 else size
        while self.at == len(self.inflated):
            if self.inflate.eof:
                if self.inflate.unused_data or self.pending or self.source.read(1):
                    raise TarRefused("the gzip stream goes on after its end (a second gzip member, or garbage)")
                return b""
            data = self.pending or self.source.read(CHUNK)
            if not data:
                raise EOFError("the gzip stream ends before its end-of-stream marker (cut short)")
            self.inflated, self.at = self.inflate.decompress(data, CHUNK), 0
            self.pending = self.inflate.unconsumed_tail
        out = self.inflated[self.at : self.at + size]
        self.at += len(out)
        return out


def decompressed(files: list, limit: int, refusal: str) -> Bounded:
    """The tar stream of the open files, one after another: gunzipped where they start as gzip
    does (one gzip member, `Gunzipped`), at most `limit` bytes of it (else TarRefused(refusal))."""
    chained = Chained(files)
    magic = chained.read(2)
    chained.ahead = magic
    return Bounded(Gunzipped(chained) if magic == b"\x1f\x8b" else chained, limit, refusal)


class TarStream:
    """Members of a tar stream, header by header: `next()` the next member (None at the end),
    `chunks()` its data; what a caller leaves unread is skipped."""

    def __init__(self, stream):
        self.stream, self.left, self.padding = stream, 0, 0

    def exact(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.stream.read(min(size - len(data), CHUNK))
            if not chunk:
                raise TarRefused("the tar stream ends inside a member (cut short)")
            data += chunk
        return data

    def chunks(self):
        while self.left:
            chunk = self.exact(min(self.left, CHUNK))
            self.left -= len(chunk)
            yield chunk

    def next(self) -> Member | None:
        for _ in self.chunks():  # what the caller left unread
            pass
        self.exact(self.padding)
        pax: dict[str, str] = {}
        while True:
            block = self.stream.read(BLOCK)
            if not block or block == bytes(BLOCK):  # the end (a writer's two zero blocks, or none)
                if pax:
                    raise TarRefused("the tar stream ends after a pax header")
                self.finish()
                return None
            if len(block) < BLOCK:
                block += self.exact(BLOCK - len(block))
            name, size, kind = parse_header(block)
            if kind != PAX:
                break
            if pax:
                raise TarRefused("two pax headers in a row")
            if size > MAX_PAX_BYTES:
                raise TarRefused(f"a pax header of {size} bytes, over the {MAX_PAX_BYTES} a run's file needs")
            pax = parse_pax(self.exact(size))
            self.exact(-size % BLOCK)
        size = int(pax["size"]) if "size" in pax else size
        self.left, self.padding = size, -size % BLOCK
        return Member(pax.get("path", name), size, "file" if kind in REGULAR else KINDS.get(kind, "unknown kind"))

    def finish(self) -> None:
        """The stream read to its end past the tar's end block (so that gzip checks its CRC-32 and
        length, and a lost last part or a second gzip member shows): at most MAX_END_BYTES more,
        zero bytes all, else TarRefused."""
        rest = b""
        while len(rest) <= MAX_END_BYTES:
            chunk = self.stream.read(MAX_END_BYTES + 1 - len(rest))
            if not chunk:
                break
            rest += chunk
        if len(rest) > MAX_END_BYTES or rest.count(0) != len(rest):
            raise TarRefused(
                "the tar stream goes on after its end (bytes other than its padding: a hidden member, "
                "another stream joined to it, or garbage)"
            )


def parse_header(block: bytes) -> tuple[str, int, bytes]:
    """A ustar header's name, size and kind, once its checksum and fields are valid."""
    if block[257:263] not in (b"ustar\x00", b"ustar "):
        raise TarRefused("a tar header that is not ustar (an old or foreign format)")
    stored = octal(block[148:156], "checksum")
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    if stored != unsigned:
        raise TarRefused("a tar header fails its checksum (damaged)")
    kind = block[156:157]
    if kind in REFUSED:
        raise TarRefused(f"the tar stream holds {REFUSED[kind]}, which no writer of runs makes")
    name, prefix = field(block[0:100]), field(block[345:500])
    return (f"{prefix}/{name}" if prefix else name), octal(block[124:136], "size"), kind


def field(raw: bytes) -> str:
    try:
        return raw.split(b"\x00", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        raise TarRefused("a tar header names a member in bytes that are not UTF-8") from None


def octal(raw: bytes, what: str) -> int:
    digits = raw.replace(b"\x00", b" ").strip()
    if not digits or len(digits) > 12 or not all(48 <= c <= 55 for c in digits):
        raise TarRefused(f"a tar header's {what} is not an octal number (base-256 or damaged)")
    return int(digits, 8)


def parse_pax(data: bytes) -> dict[str, str]:
    """A pax header's records ("<length> <key>=<value>\\n"), each of a known key, once."""
    records, at = {}, 0
    while at < len(data):
        space = data.find(b" ", at, at + 8)
        length = int(data[at:space]) if space > at and PAX_LENGTH.fullmatch(data[at:space]) else 0
        record = data[at : at + length]
        key, sep, value = record[space - at + 1 : -1].partition(b"=")
        if length < 5 or len(record) != length or not record.endswith(b"\n") or not sep:
            raise TarRefused("a pax header's records do not parse")
        name = key.decode("ascii", "replace")
        if name not in PAX_KEYS or name in records:
            raise TarRefused(f"a pax header holds {name[:40]!r}, which no writer of runs makes (or twice)")
        try:
            records[name] = value.decode("utf-8")
        except UnicodeDecodeError:
            raise TarRefused("a pax header holds bytes that are not UTF-8") from None
        at += length
    if "size" in records and not DECIMAL.fullmatch(records["size"]):
        raise TarRefused("a pax header's size is not a number (ASCII digits)")
    return records
