"""`LocalBlobStore`: the blob store (`waitstate.blobs.store.BlobStore`) as files in a directory,
written atomically and durably (a temporary file, fsync, rename, fsync of the directory).

One machine's workers share it as it is; several share it on a shared volume. Object storage is
`waitstate.blobs.s3`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator, Hashable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from waitstate.blobs.owners import (
    OWNERS_DIR,
    TRASH_DIR,
    OwnedBlobs,
    aside_name,
    marker_body,
    marker_name,
    owner_from_body,
    parse_aside,
)
from waitstate.blobs.refs import (
    DIGEST,
    RECORDS_DIR,
    SHARE_ONE_STORE,
    BlobNotFound,
    BlobStoreUnavailable,
    check_record_name,
    parse_ref,
    ref_for,
)
from waitstate.blobs.store import BlobStore

__all__ = ["LocalBlobStore"]


class LocalBlobStore(OwnedBlobs, BlobStore):
    """Blobs as files in a directory, at `root/ab/cdef...` (the digest's first two hex chars,
    then the rest), so no directory grows past a few thousand entries per million blobs.
    Owner markers are small files at `root/owners/<digest>/<marker name>` holding the owner's
    id; a cleanup sets a blob aside by renaming it into `root/trash/`.

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

    async def put(self, data: bytes, owner: str | None = None) -> str:
        """Store `data` and return its reference; the same bytes always get the same one.

        With `owner`, its marker is written first (see `OwnedBlobs.delete_unless_owned`).

        Raises:
            BlobStoreUnavailable: the directory could not be written (read-only, full, gone).
            ValueError: `owner` is empty.
        """
        name = marker_name(owner) if owner is not None else None
        with self._outage("written"):
            # Hashing megabytes takes milliseconds: it goes to the thread with the write.
            digest = await asyncio.to_thread(self._put, bytes(data), owner, name)
        return ref_for(digest)

    async def get(self, ref: str, offset: int = 0, length: int | None = None) -> bytes:
        """Up to `length` bytes of the blob from `offset` (all the rest when `length` is None).

        A slice that runs past the end is cut short; one that starts past it is empty.

        Raises:
            BlobNotFound: nothing is stored under `ref`.
            BlobStoreUnavailable: the directory could not be read.
            ValueError: `ref` is not a blob reference, or `offset`/`length` is negative.
        """
        digest = parse_ref(ref)
        if offset < 0:
            raise ValueError(f"offset must be 0 or more, got {offset}")
        if length is not None and length < 0:
            raise ValueError(f"length must be 0 or more, got {length}")
        with self._outage("read"):
            return await asyncio.to_thread(self._read, ref, digest, offset, length)

    async def size(self, ref: str) -> int:
        """The blob's size in bytes.

        Raises:
            BlobNotFound: nothing is stored under `ref`.
            BlobStoreUnavailable: the directory could not be read.
            ValueError: `ref` is not a blob reference.
        """
        digest = parse_ref(ref)
        with self._outage("read"):
            return await asyncio.to_thread(self._size, ref, digest)

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

    async def put_record(self, name: str, data: bytes) -> bool:
        """Write the record `name` (a file under `root/records/`) unless it exists; whether this
        call wrote it. The file is written whole under a temporary name, then linked to its own
        (a hard link fails if the name exists: of racing writers, one wins).

        Raises:
            BlobStoreUnavailable: the directory could not be written.
            ValueError: `name` is not a record name.
        """
        path = self.root / RECORDS_DIR / check_record_name(name)
        with self._outage("written"):
            return await asyncio.to_thread(_create_once, path, bytes(data))

    async def get_record(self, name: str) -> bytes | None:
        """The record `name`, or None if it was never written.

        Raises:
            BlobStoreUnavailable: the directory could not be read.
            ValueError: `name` is not a record name.
        """
        path = self.root / RECORDS_DIR / check_record_name(name)
        with self._outage("read"):
            try:
                return await asyncio.to_thread(path.read_bytes)
            except FileNotFoundError:
                return None

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:]

    @contextlib.contextmanager
    def _outage(self, done: str) -> Iterator[None]:
        """An OS error of the directory (read-only, full, gone, an I/O error) as the outage it
        is; a blob that is not there stays BlobNotFound."""
        try:
            yield
        except BlobStoreUnavailable:
            raise
        except OSError as err:
            raise BlobStoreUnavailable(
                f"the directory store {self.root} could not be {done}: {err}"
            ) from err

    def _put(self, data: bytes, owner: str | None, name: str | None) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if owner is not None and name is not None:
            # The marker before the look for the blob: what makes a cleanup's delete safe.
            self._mark(digest, owner, name)
        path = self._path(digest)
        with contextlib.suppress(FileNotFoundError):
            # Same name, same bytes: already stored. The size check lets a put repair a file
            # damaged outside the store (truncated by hand, a disk fault).
            if path.stat().st_size == len(data):
                return digest
        with _written(path.parent, data) as tmp:
            os.replace(tmp, path)
        _fsync_dir(path.parent)
        return digest

    def _mark(self, digest: str, owner: str, name: str) -> None:
        directory = self._owners_dir(digest)
        created = False
        for _ in range(3):
            if not directory.is_dir():
                directory.mkdir(parents=True, exist_ok=True)
                created = True
            try:
                # Written anew even when it exists: a cleanup deleting the blob sees it change.
                fd, tmp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")
                break
            except FileNotFoundError:  # a cleanup removed the blob's last marker, and its dir
                continue
        else:
            raise FileNotFoundError(f"could not write the owner marker in {directory}")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(marker_body(owner))
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, directory / name)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        # Durable like the blob: a marker forgotten in a crash could leave a blob to be deleted
        # under a run that still reads it (when another, ended, owner's marker survived).
        _fsync_dir(directory)
        if created:
            _fsync_dir(directory.parent)

    def _read(self, ref: str, digest: str, offset: int, length: int | None) -> bytes:
        for path in (self._path(digest), *self._aside_paths(digest)):
            try:
                with open(path, "rb") as file:
                    # Seek, not read-and-slice: a 4 KB slice of a 5 GB blob reads 4 KB.
                    file.seek(offset)
                    return file.read() if length is None else file.read(length)
            except FileNotFoundError:
                continue
        raise self._not_found(ref)

    def _size(self, ref: str, digest: str) -> int:
        for path in (self._path(digest), *self._aside_paths(digest)):
            try:
                return path.stat().st_size
            except FileNotFoundError:
                continue
        raise self._not_found(ref)

    def _aside_paths(self, digest: str) -> list[Path]:
        # Only on a miss: a blob a cleanup has set aside for a moment is still readable (it
        # is put back when a run wrote it meanwhile; see OwnedBlobs.delete_unless_owned).
        try:
            with os.scandir(self.root / TRASH_DIR) as entries:
                return [Path(e.path) for e in entries if e.name.startswith(digest + ".")]
        except FileNotFoundError:
            return []

    # --- the primitives of OwnedBlobs --------------------------------------------------------

    def _owners_dir(self, digest: str) -> Path:
        return self.root / OWNERS_DIR / digest

    async def _markers(self, digest: str) -> dict[str, Hashable]:
        return await asyncio.to_thread(_marker_versions, self._owners_dir(digest))

    async def _read_marker(self, digest: str, name: str) -> str | None:
        try:
            data = await asyncio.to_thread((self._owners_dir(digest) / name).read_bytes)
        except FileNotFoundError:
            return None
        return owner_from_body(data)

    async def _remove_marker(self, digest: str, name: str) -> None:
        await asyncio.to_thread(self._unmark, digest, name)

    def _unmark(self, digest: str, name: str) -> None:
        directory = self._owners_dir(digest)
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()
        # The blob's last marker gone: its directory goes too (unless a put just wrote one).
        with contextlib.suppress(FileNotFoundError, OSError):
            directory.rmdir()

    async def _stored(self, digest: str) -> bool:
        return await asyncio.to_thread(self._path(digest).is_file)

    async def _move_aside(self, digest: str) -> tuple[str, int] | None:
        return await asyncio.to_thread(self._set_aside, digest)

    def _set_aside(self, digest: str) -> tuple[str, int] | None:
        trash = self.root / TRASH_DIR
        trash.mkdir(parents=True, exist_ok=True)
        name = aside_name(digest)
        try:
            # Atomic: from here no reader or put finds the blob under its name.
            os.replace(self._path(digest), trash / name)
        except FileNotFoundError:
            return None
        return name, (trash / name).stat().st_size

    async def _put_back(self, digest: str, name: str) -> None:
        await asyncio.to_thread(self._restore, digest, name)

    def _restore(self, digest: str, name: str) -> None:
        path = self._path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Over a copy a racing put wrote meanwhile, if any: the same bytes.
        os.replace(self.root / TRASH_DIR / name, path)
        _fsync_dir(path.parent)

    async def _drop(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread((self.root / TRASH_DIR / name).unlink)

    async def _aside(self) -> AsyncIterator[tuple[str, str, float]]:
        for name in await asyncio.to_thread(_names, self.root / TRASH_DIR):
            if (parsed := parse_aside(name)) is not None:
                yield name, *parsed

    def _not_found(self, ref: str) -> BlobNotFound:
        return BlobNotFound(
            f"no blob stored under {ref} in the directory store {self.root}; {SHARE_ONE_STORE} "
            "(WAITSTATE_BLOB_URL for object storage, or WAITSTATE_BLOB_DIR on a shared volume)"
        )


def _create_once(path: Path, data: bytes) -> bool:
    with _written(path.parent, data) as tmp:
        try:
            os.link(tmp, path)  # atomic, and refused if the name exists
        except FileExistsError:
            return False
    _fsync_dir(path.parent)
    return True


@contextlib.contextmanager
def _written(directory: Path, data: bytes) -> Iterator[str]:
    """A file of `directory` holding `data`, on disk, under a temporary name, which is gone
    once the block ends (renamed, linked or removed). Unique per writer, so concurrent writes
    never share a file; the leading dot and the suffix keep it from ever looking like a blob
    or a record."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            # On disk before it takes its name, or a crash could leave the name with no content.
            os.fsync(file.fileno())
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _marker_versions(directory: Path) -> dict[str, Hashable]:
    # A marker is replaced, never written in place: a new inode and time on every write.
    found: dict[str, Hashable] = {}
    with contextlib.suppress(FileNotFoundError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith("."):  # a marker being written
                continue
            with contextlib.suppress(FileNotFoundError):
                stat = entry.stat()
                found[entry.name] = (stat.st_ino, stat.st_mtime_ns)
    return found


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


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
            if DIGEST.fullmatch(digest):
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
