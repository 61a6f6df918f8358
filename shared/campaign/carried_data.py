"""A dataset copy travels in a bundle gzip-compressed, and the session unpacks it to the very
bytes it was (its SHA-256, which names the copy in every run id, is checked after).

Why: an upload to a GPU machine is limited (a device service's, a cluster's quota), and a copy
is mostly redundancy that deflate removes. The CIFAR-10 JPEG copy's zip (62.2 MB) holds 60,000
images of about 900 bytes, each with the same JPEG headers and a near-identical zip entry: at
gzip level 9 it packs into 19.8 MB in about a second and unpacks in a tenth of one. gzip is in
every Python's standard library; the official archives are compressed already and travel as
they are."""

from __future__ import annotations

import gzip
import shutil
import zlib
from pathlib import Path

from shared.data.catalog import DataError
from shared.runs.files import write_atomically

PACKED = ".gz"  # a packed copy's name: the copy's own name and this
UNPACKED_LIMIT = 16 * 2**30  # bytes one packed copy may unpack to: a damaged or hostile file fills no disk
CHUNK = 2**20


class UnpackError(DataError):
    """A packed copy that cannot be unpacked; the message is one line."""


def pack(source: Path, packed: Path) -> None:
    """`source` gzip-compressed (level 9, no name or time in the header: the same file packs to the
    same bytes) into `packed`, written atomically."""

    def write(tmp: Path) -> None:
        with open(source, "rb") as src, open(tmp, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as out:
                shutil.copyfileobj(src, out, CHUNK)

    write_atomically(packed, write)


def unpack_all(folder: Path, limit: int = UNPACKED_LIMIT) -> list[Path]:
    """Each packed copy in `folder` unpacked beside it (under its own name less PACKED), where
    that file is not there yet; the files unpacked. The packed files are kept."""
    unpacked = []
    for packed in sorted(folder.glob(f"*{PACKED}")) if folder.is_dir() else []:
        target = packed.with_name(packed.name[: -len(PACKED)])
        if packed.is_file() and not target.exists():
            write_atomically(target, lambda tmp, packed=packed: unpack(packed, tmp, limit))
            unpacked.append(target)
    return unpacked


def unpack(packed: Path, target: Path, limit: int) -> None:
    """`packed` decompressed into `target`, chunk by chunk: no more than `limit` bytes written
    and CHUNK held at a time; UnpackError where it is not gzip, is cut short or unpacks larger."""
    written = 0
    try:
        with gzip.open(packed, "rb") as src, open(target, "wb") as out:
            while chunk := src.read(CHUNK):
                written += len(chunk)
                if written > limit:
                    raise UnpackError(f"{packed} unpacks to more than {limit / 2**30:g} GiB: not a packed copy")
                out.write(chunk)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise UnpackError(f"{packed} cannot be unpacked ({type(exc).__name__}: {exc}): bundle it again") from None
