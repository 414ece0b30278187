"""A content-addressed blob store: bytes are kept under their SHA-256 and named by a reference.

A blob's reference is `ref://blobs/<sha256 hex>`. Because the name is derived from the content,
writing is idempotent (the same bytes always get the same reference, and writing them twice
is harmless) and a reference can never point at different bytes later.

`BlobStore` is the whole interface: put, get a slice, size, and (for a cleanup) delete and list.
`LocalBlobStore` keeps blobs in a directory; `S3BlobStore` (`waitstate.blobs.s3`) in
S3-compatible object storage, with the digest as the object key and ranged GETs for slices. Both
name a blob by the same reference. What matters is that every worker of a deployment reaches the
same store: a run's history holds only references, so a shared store is what lets any worker
resume any run, including one another worker started before it crashed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

REF_PREFIX = "ref://blobs/"
_DIGEST = re.compile(r"[0-9a-f]{64}")
# What a BlobNotFound adds: the usual cause is a worker configured with a store of its own.
SHARE_ONE_STORE = "workers of one fleet must share one store"


class BlobNotFound(KeyError):
    """No blob is stored under that reference."""

    def __str__(self) -> str:
        # KeyError's own str() is the repr of its argument; a message reads better unquoted.
        return str(self.args[0]) if self.args else "blob not found"


def ref_for(digest: str) -> str:
    """The reference of the blob whose SHA-256 (lowercase hex) is `digest`.

    Raises:
        ValueError: `digest` is not 64 lowercase hex characters.
    """
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"not a sha256 hex digest: {digest!r}; expected 64 lowercase hex chars")
    return REF_PREFIX + digest


def parse_ref(ref: str) -> str:
    """The SHA-256 hex digest a reference names.

    Only `ref://blobs/` followed by exactly 64 lowercase hex characters is accepted, so a
    reference can never name a path outside the store (`ref://blobs/../../etc/passwd`).

    Raises:
        ValueError: `ref` is not a blob reference.
    """
    expected = f"expected {REF_PREFIX}<sha256> with 64 lowercase hex chars"
    if not isinstance(ref, str) or not ref.startswith(REF_PREFIX):
        raise ValueError(f"not a blob reference: {ref!r}; {expected}")
    digest = ref[len(REF_PREFIX) :]
    # fullmatch, not match with `$`: `$` would also accept a trailing newline.
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"malformed blob reference: {ref!r}; {expected}")
    return digest


class BlobStore(Protocol):
    """Where large values live, named by the SHA-256 of their bytes."""

    async def put(self, data: bytes) -> str:
        """Store `data` and return its reference; the same bytes always get the same one."""
        ...

    async def get(self, ref: str, offset: int = 0, length: int | None = None) -> bytes:
        """Up to `length` bytes of the blob from `offset` (all the rest when `length` is None).

        A slice that runs past the end is cut short; one that starts past it is empty.

        Raises:
            BlobNotFound: nothing is stored under `ref`.
            ValueError: `ref` is not a blob reference, or `offset`/`length` is negative.
        """
        ...

    async def size(self, ref: str) -> int:
        """The blob's size in bytes.

        Raises:
            BlobNotFound: nothing is stored under `ref`.
            ValueError: `ref` is not a blob reference.
        """
        ...

    async def delete(self, ref: str) -> bool:
        """Remove the blob; True if it was stored, False if there was nothing to remove.

        Raises:
            ValueError: `ref` is not a blob reference.
        """
        ...

    # A plain `def` here: the stores implement it as an async generator (`async def` with
    # `yield`), which is a function returning an AsyncIterator, not a coroutine.
    def refs(self) -> AsyncIterator[tuple[str, datetime]]:
        """Every stored blob's reference with when it was last written (UTC), in no set order.

        What else lives in the store's directory or under its prefix is skipped.
        """
        ...


class LocalBlobStore(BlobStore):
    """Blobs as files in a directory, at `root/ab/cdef...` (the digest's first two hex chars,
    then the rest), so no directory grows past a few thousand entries per million blobs.

    Writes go to a temporary file in the blob's directory, are flushed to disk, then renamed
    into place with `os.replace`, which is atomic: concurrent writers of the same blob and a
    crash mid-write never leave a partial blob under a blob's name. File I/O runs in a thread
    (`asyncio.to_thread`), off the event loop.

    Args:
        root: The store's directory; created on the first write. Workers that share it (a
            shared volume) share the blobs.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    async def put(self, data: bytes) -> str:
        """Store `data` and return its reference; the same bytes always get the same one."""
        # Hashing megabytes takes milliseconds: it goes to the thread with the write.
        digest = await asyncio.to_thread(self._put, bytes(data))
        return ref_for(digest)

    async def get(self, ref: str, offset: int = 0, length: int | None = None) -> bytes:
        """Up to `length` bytes of the blob from `offset` (all the rest when `length` is None).

        A slice that runs past the end is cut short; one that starts past it is empty.

        Raises:
            BlobNotFound: nothing is stored under `ref`.
            ValueError: `ref` is not a blob reference, or `offset`/`length` is negative.
        """
        path = self._path(parse_ref(ref))
        if offset < 0:
            raise ValueError(f"offset must be 0 or more, got {offset}")
        if length is not None and length < 0:
            raise ValueError(f"length must be 0 or more, got {length}")
        return await asyncio.to_thread(self._read, ref, path, offset, length)

    async def size(self, ref: str) -> int:
        """The blob's size in bytes.

        Raises:
            BlobNotFound: nothing is stored under `ref`.
            ValueError: `ref` is not a blob reference.
        """
        path = self._path(parse_ref(ref))
        return await asyncio.to_thread(self._size, ref, path)

    async def delete(self, ref: str) -> bool:
        """Remove the blob; True if it was stored, False if there was nothing to remove.

        Raises:
            ValueError: `ref` is not a blob reference.
        """
        path = self._path(parse_ref(ref))
        try:
            await asyncio.to_thread(path.unlink)
        except FileNotFoundError:
            return False
        return True

    async def refs(self) -> AsyncIterator[tuple[str, datetime]]:
        """Every stored blob's reference with when it was last written (UTC), in no set order.

        Other files in the directory (a write's temporary file, anything put there by hand) are
        skipped. The directory is read one fan-out directory at a time, in a thread.
        """
        fanout = await asyncio.to_thread(_subdirectories, self.root)
        for directory in fanout:
            for digest, mtime in await asyncio.to_thread(_blob_files, directory):
                yield ref_for(digest), datetime.fromtimestamp(mtime, UTC)

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:]

    def _put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        with contextlib.suppress(FileNotFoundError):
            # Same name, same bytes: already stored. The size check lets a put repair a file
            # damaged outside the store (truncated by hand, a disk fault).
            if path.stat().st_size == len(data):
                return digest
        path.parent.mkdir(parents=True, exist_ok=True)
        # A unique temp name per writer, so concurrent puts of one blob never share a file;
        # the leading dot and suffix keep it from ever looking like a digest.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                # On disk before the rename, or a crash could leave the name with no content.
                os.fsync(file.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(path.parent)
        return digest

    def _read(self, ref: str, path: Path, offset: int, length: int | None) -> bytes:
        try:
            with open(path, "rb") as file:
                # Seek, not read-and-slice: a 4 KB slice of a 5 GB blob reads 4 KB.
                file.seek(offset)
                return file.read() if length is None else file.read(length)
        except FileNotFoundError:
            raise self._not_found(ref) from None

    def _size(self, ref: str, path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            raise self._not_found(ref) from None

    def _not_found(self, ref: str) -> BlobNotFound:
        return BlobNotFound(
            f"no blob stored under {ref} in the directory store {self.root}; {SHARE_ONE_STORE} "
            "(WAITSTATE_BLOB_URL for object storage, or WAITSTATE_BLOB_DIR on a shared volume)"
        )


def _subdirectories(root: Path) -> list[Path]:
    try:
        with os.scandir(root) as entries:
            return [Path(e.path) for e in entries if len(e.name) == 2 and e.is_dir()]
    except FileNotFoundError:  # nothing written yet
        return []


def _blob_files(directory: Path) -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    # A directory or file may be removed while it is read (a concurrent delete): it is skipped.
    with contextlib.suppress(FileNotFoundError), os.scandir(directory) as entries:
        for entry in entries:
            digest = directory.name + entry.name
            if _DIGEST.fullmatch(digest):
                with contextlib.suppress(FileNotFoundError):
                    if entry.is_file():
                        found.append((digest, entry.stat().st_mtime))
    return found


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable: without it a crash may forget a blob that a run's
    # history already names. Directories cannot be opened this way on Windows.
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
