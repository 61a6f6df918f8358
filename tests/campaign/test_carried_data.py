"""A dataset copy travels packed (shared/campaign/carried_data.py): it unpacks to its very bytes,
once, and a damaged or oversized packed file is refused in one line with nothing left behind."""

import gzip
import os

import pytest

from shared.campaign.carried_data import PACKED, UnpackError, pack, unpack_all


def test_a_packed_copy_unpacks_to_its_bytes_once_and_packs_the_same_each_time(tmp_path):
    copy = tmp_path / "copy.zip"
    copy.write_bytes(os.urandom(3000) + bytes(200_000))  # incompressible and redundant parts
    folder = tmp_path / "carry"
    pack(copy, folder / f"copy.zip{PACKED}")
    first = (folder / f"copy.zip{PACKED}").read_bytes()
    assert len(first) < 20_000  # the redundancy is gone
    pack(copy, tmp_path / "again.gz")
    assert (tmp_path / "again.gz").read_bytes() == first  # no name or time in the header

    assert unpack_all(folder) == [folder / "copy.zip"]
    assert (folder / "copy.zip").read_bytes() == copy.read_bytes()
    assert (folder / f"copy.zip{PACKED}").read_bytes() == first  # kept
    (folder / "copy.zip").write_bytes(b"what is there stays")
    assert unpack_all(folder) == [] and (folder / "copy.zip").read_bytes() == b"what is there stays"
    assert unpack_all(tmp_path / "absent") == []


@pytest.mark.parametrize(
    "packed, limit, message",
    [
        (b"not gzip at all", 2**20, "cannot be unpacked (BadGzipFile"),
        (gzip.compress(bytes(100_000))[:-20], 2**20, "cannot be unpacked (EOFError"),
        (gzip.compress(bytes(3 * 2**20)), 2**20, "unpacks to more than"),
    ],
)
def test_a_damaged_or_oversized_packed_copy_is_refused_in_one_line_and_leaves_nothing(tmp_path, packed, limit, message):
    (tmp_path / f"copy.zip{PACKED}").write_bytes(packed)
    with pytest.raises(UnpackError) as refused:
        unpack_all(tmp_path, limit)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"copy.zip{PACKED}"]
