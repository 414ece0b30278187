"""What every blob store does alike, asked of the directory store and of S3 (moto over HTTP):
the reference of a put, an empty blob, how a slice is cut, and a delete."""

from __future__ import annotations

import hashlib

import pytest

from waitstate.blobs import BlobNotFound, LocalBlobStore
from waitstate.blobs.s3 import S3BlobStore

DIGEST = hashlib.sha256(b"hello").hexdigest()
# Slices of b"0123456789": (offset, length, what a store gives), within the blob; and past
# its end, cut short or empty.
SLICES = [
    (0, None, b"0123456789"),
    (0, 3, b"012"),
    (4, 3, b"456"),
    (7, None, b"789"),
    (9, 1, b"9"),
    (3, 0, b""),
]
SLICES_PAST_THE_END = [(8, 100, b"89"), (10, 5, b""), (10, None, b""), (50, None, b"")]
Store = LocalBlobStore | S3BlobStore


async def test_round_trip(store: Store) -> None:
    ref = await store.put(b"hello")

    assert ref == f"ref://blobs/{DIGEST}"
    assert await store.get(ref) == b"hello"
    assert await store.size(ref) == 5


async def test_empty_blob(store: Store) -> None:
    ref = await store.put(b"")

    assert (await store.get(ref), await store.size(ref)) == (b"", 0)
    assert await store.get(ref, 0, 10) == b""
    assert await store.get(ref, 3) == b""


@pytest.mark.parametrize(("offset", "length", "expected"), [*SLICES, *SLICES_PAST_THE_END])
async def test_slices(store: Store, offset: int, length: int | None, expected: bytes) -> None:
    ref = await store.put(b"0123456789")

    assert await store.get(ref, offset, length) == expected


@pytest.mark.parametrize(("offset", "length"), [(-1, None), (0, -1)])
async def test_negative_offset_or_length_is_refused(
    store: Store, offset: int, length: int | None
) -> None:
    ref = await store.put(b"0123456789")

    with pytest.raises(ValueError, match="must be 0 or more"):
        await store.get(ref, offset, length)


async def test_delete(store: Store) -> None:
    ref = await store.put(b"hello")
    kept = await store.put(b"kept")

    assert await store.delete(ref) is True
    assert await store.delete(ref) is False
    with pytest.raises(BlobNotFound):
        await store.get(ref)
    assert await store.get(kept) == b"kept"
