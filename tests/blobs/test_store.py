"""LocalBlobStore and blob references: files by digest, bad refs, atomic writes (round trips,
slices and deletes, alike on every store, are in test_both_stores.py)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import pytest

from waitstate.blobs import REF_PREFIX, BlobNotFound, LocalBlobStore, parse_ref, ref_for

DIGEST = hashlib.sha256(b"hello").hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


def stored_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


async def test_files_fan_out_by_the_digest(store: LocalBlobStore) -> None:
    await store.put(b"hello")

    assert stored_files(store.root) == [store.root / DIGEST[:2] / DIGEST[2:]]


async def test_put_is_idempotent(store: LocalBlobStore) -> None:
    first = await store.put(b"hello")
    second = await store.put(b"hello")

    assert first == second
    assert len(stored_files(store.root)) == 1
    assert await store.get(first) == b"hello"


async def test_same_content_same_ref_across_stores(tmp_path: Path) -> None:
    one, two = LocalBlobStore(tmp_path / "one"), LocalBlobStore(tmp_path / "two")

    assert await one.put(b"same") == await two.put(b"same")
    assert await one.put(b"same") != await one.put(b"different")


async def test_unknown_ref(store: LocalBlobStore) -> None:
    ref = ref_for(DIGEST)

    with pytest.raises(BlobNotFound, match=f"no blob stored under {ref}"):
        await store.get(ref)
    with pytest.raises(BlobNotFound):
        await store.size(ref)
    assert issubclass(BlobNotFound, KeyError)
    assert str(BlobNotFound("no blob stored under x")) == "no blob stored under x"


async def test_unknown_ref_names_the_directory_and_the_fix(store: LocalBlobStore) -> None:
    with pytest.raises(BlobNotFound) as caught:
        await store.get(ref_for(DIGEST))

    message = str(caught.value)
    assert f"in the directory store {store.root};" in message
    assert "workers of one fleet must share one store" in message
    assert "WAITSTATE_BLOB_URL" in message and "WAITSTATE_BLOB_DIR" in message


async def test_delete_where_nothing_was_written_or_of_a_malformed_ref(
    store: LocalBlobStore,
) -> None:
    assert await LocalBlobStore(store.root / "never-written").delete(ref_for(DIGEST)) is False
    with pytest.raises(ValueError, match="blob reference"):
        await store.delete("ref://blobs/../etc/passwd")


async def test_refs_lists_every_blob_with_its_time(store: LocalBlobStore) -> None:
    assert [ref async for ref in LocalBlobStore(store.root / "never-written").refs()] == []
    before = datetime.now(UTC) - timedelta(seconds=5)
    refs = {await store.put(data) for data in (b"one", b"two", b"three")}
    # What else is in the directory is not a blob: a write's temp file, a note, a stray dir.
    digest = parse_ref(next(iter(refs)))
    (store.root / digest[:2] / ".x.tmp").write_bytes(b"partial")
    (store.root / "README").write_text("blobs")
    (store.root / "zz").mkdir()
    (store.root / "zz" / ("0" * 62)).write_bytes(b"not hex")

    listed = [item async for item in store.refs()]

    assert {ref for ref, _ in listed} == refs and len(listed) == 3
    assert all(before < written <= datetime.now(UTC) for _, written in listed)


MALFORMED = [
    "",
    "ref://blobs/",
    "ref://blobs/../../etc/passwd",
    f"ref://blobs/../{DIGEST[3:]}",
    f"ref://blobs/{DIGEST[:2]}/{DIGEST[2:]}",
    f"ref://blobs/{DIGEST.upper()}",
    f"ref://blobs/{DIGEST[:-1]}",
    f"ref://blobs/{DIGEST}0",
    f"ref://blobs/{DIGEST}\n",
    f" ref://blobs/{DIGEST}",
    f"ref://blobs/{DIGEST[:-1]}g",
    f"ref://other/{DIGEST}",
    f"blobs/{DIGEST}",
    DIGEST,
    "/etc/passwd",
]


@pytest.mark.parametrize("ref", MALFORMED)
async def test_malformed_refs_are_refused(store: LocalBlobStore, ref: str) -> None:
    with pytest.raises(ValueError, match="blob reference"):
        parse_ref(ref)
    with pytest.raises(ValueError, match="blob reference"):
        await store.get(ref)
    with pytest.raises(ValueError, match="blob reference"):
        await store.size(ref)


def test_parse_ref_returns_the_digest() -> None:
    assert parse_ref(REF_PREFIX + DIGEST) == DIGEST
    assert parse_ref(ref_for(DIGEST)) == DIGEST


@pytest.mark.parametrize("digest", ["", "../etc/passwd", DIGEST.upper(), DIGEST[:-1]])
def test_ref_for_refuses_what_is_not_a_digest(digest: str) -> None:
    with pytest.raises(ValueError, match="not a sha256 hex digest"):
        ref_for(digest)


async def test_a_write_leaves_no_temp_files(store: LocalBlobStore) -> None:
    await store.put(b"one")
    await store.put(b"two")
    await store.put(b"one")

    assert all(not path.name.startswith(".") for path in stored_files(store.root))
    assert len(stored_files(store.root)) == 2


async def test_a_failed_write_leaves_neither_blob_nor_temp_file(
    store: LocalBlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A crash between writing the temp file and renaming it into place.
    def crash(src: Any, dst: Any) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        await store.put(b"hello")
    monkeypatch.undo()

    assert stored_files(store.root) == []
    with pytest.raises(BlobNotFound):
        await store.get(ref_for(DIGEST))
    assert await store.get(await store.put(b"hello")) == b"hello"


async def test_concurrent_writers_of_one_blob(store: LocalBlobStore) -> None:
    data = os.urandom(256 * 1024)

    refs = await asyncio.gather(*(store.put(data) for _ in range(8)))

    assert len(set(refs)) == 1
    assert stored_files(store.root) == [
        store.root / parse_ref(refs[0])[:2] / parse_ref(refs[0])[2:]
    ]
    assert await store.get(refs[0]) == data


async def test_put_repairs_a_damaged_blob(store: LocalBlobStore) -> None:
    ref = await store.put(b"hello")
    digest = parse_ref(ref)
    (store.root / digest[:2] / digest[2:]).write_bytes(b"hel")

    assert await store.put(b"hello") == ref
    assert await store.get(ref) == b"hello"


async def test_a_5_mb_blob(store: LocalBlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(5 * 1024 * 1024)
    ref = await store.put(data)
    assert ref == ref_for(hashlib.sha256(data).hexdigest())
    assert await store.size(ref) == len(data)
    assert await store.get(ref) == data

    # A slice seeks to its offset and reads only its own bytes, not the whole file.
    reads: list[int] = []

    class Spy:
        def __init__(self, file: IO[bytes]) -> None:
            self.file = file

        def __enter__(self) -> Spy:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def seek(self, offset: int) -> int:
            return self.file.seek(offset)

        def read(self, size: int = -1) -> bytes:
            chunk = self.file.read(size)
            reads.append(len(chunk))
            return chunk

    def spy_open(path: Path, mode: str) -> Spy:
        return Spy(path.open(mode))

    monkeypatch.setattr("waitstate.blobs.local.open", spy_open, raising=False)
    offset = 3 * 1024 * 1024 + 17
    assert await store.get(ref, offset, 4000) == data[offset : offset + 4000]
    assert reads == [4000]
