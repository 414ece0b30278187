"""Records, asked of the directory store and of S3 (moto over HTTP): a small value under a name
of the caller's, written once (of writers that race, one wins), never listed as a blob."""

from __future__ import annotations

import asyncio

import pytest

from waitstate.blobs import LocalBlobStore
from waitstate.blobs.s3 import S3BlobStore

Store = LocalBlobStore | S3BlobStore


async def test_a_record_is_written_once_and_read_by_its_name(store: Store) -> None:
    first = await store.put_record("mrtr/abc/reply/0", b'{"round": 1}')
    second = await store.put_record("mrtr/abc/reply/0", b'{"round": 2}')

    assert (first, second) == (True, False)
    assert await store.get_record("mrtr/abc/reply/0") == b'{"round": 1}'
    assert await store.get_record("mrtr/abc/reply/1") is None
    assert [ref async for ref in store.refs()] == []


async def test_of_writers_that_race_exactly_one_wins(store: Store) -> None:
    wrote = await asyncio.gather(
        *(store.put_record("race/sending/1", f"writer {i}".encode()) for i in range(8))
    )

    assert wrote.count(True) == 1
    assert await store.get_record("race/sending/1") == f"writer {wrote.index(True)}".encode()


@pytest.mark.parametrize("name", ["", "../outside", "a/../b", "/abs", "a//b", ".hidden", "a b"])
async def test_a_name_that_could_leave_the_records_is_refused(store: Store, name: str) -> None:
    with pytest.raises(ValueError, match="not a record name"):
        await store.put_record(name, b"x")
    with pytest.raises(ValueError, match="not a record name"):
        await store.get_record(name)
