"""Blobs in S3-compatible object storage (AWS S3, MinIO, R2, GCS through its S3 API...).

The same content addressing and references as `LocalBlobStore`: a blob is the object
`<prefix>/<first 2 hex of its sha256>/<the other 62>` in one bucket, so a run reads its
references the same way whichever store wrote them. Owner markers are the small objects
`<prefix>/owners/<digest>/<marker name>` (holding the owner's id), and a cleanup sets a blob
aside by copying it to `<prefix>/trash/...` and deleting the original (S3 has no rename). The S3 protocol is `obstore`'s (Rust's
`object_store`, async, with ranged GETs), never written by hand here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Hashable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError
from obstore.exceptions import BaseError as ObstoreError
from obstore.store import S3Store

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
    RECORDS_DIR,
    SHARE_ONE_STORE,
    BlobNotFound,
    BlobStoreUnavailable,
    check_record_name,
    parse_ref,
    ref_for,
)
from waitstate.blobs.store import BlobStore

if TYPE_CHECKING:
    from obstore import GetOptions
    from obstore.store import S3Config

# obstore retries 5xx answers and dropped connections for up to 3 minutes by default; a blob
# call is one step of an activity, whose own retry policy is the one that should decide
# beyond a few quick tries (and shows the failure in the Web UI).
_RETRY_TIMEOUT = timedelta(seconds=30)
_MAX_RETRIES = 3
# obstore raises the builtin FileNotFoundError for a missing object; its own NotFoundError is
# declared too, so either is caught.
_MISSING = (FileNotFoundError, NotFoundError)


class S3BlobStore(OwnedBlobs, BlobStore):
    """Blobs as objects in an S3 bucket, under a key prefix.

    Credentials and region come from the usual AWS environment (`AWS_ACCESS_KEY_ID`,
    `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` or `AWS_DEFAULT_REGION`, web
    identity, instance metadata), read by the client itself; so is `AWS_ENDPOINT_URL` when
    `endpoint` is not given.

    An object is written whole by one PUT, so no reader ever sees part of a blob, and puts of
    the same blob by concurrent workers write the same bytes under the same key. The safe
    delete relies on S3's strong read-after-write consistency for PUTs and LISTs (AWS S3
    since 2020, MinIO, R2): a marker written before a listing is in the listing.

    Args:
        bucket: The bucket; it must exist.
        prefix: Where in the bucket the blobs live (`""`: its root). Stores with different
            prefixes share no blobs, so one bucket can hold several fleets' stores.
        endpoint: An S3-compatible server's URL (`http://127.0.0.1:9000` for a local MinIO);
            plain `http://` is allowed for it, since the operator named it.
        config: obstore `S3Config` values that override the environment (tests pass
            credentials this way).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        config: S3Config | None = None,
    ) -> None:
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        overrides: S3Config = {**(config or {})}
        if endpoint:
            overrides["endpoint"] = endpoint
        self._store = S3Store(
            bucket,
            prefix=self.prefix or None,
            config=overrides,
            client_options={"allow_http": bool(endpoint and endpoint.startswith("http://"))},
            retry_config={"max_retries": _MAX_RETRIES, "retry_timeout": _RETRY_TIMEOUT},
        )

    def __repr__(self) -> str:
        return f"S3BlobStore({self.url!r})"

    async def put(self, data: bytes, owner: str | None = None) -> str:
        """Store `data` and return its reference; the same bytes always get the same one.

        A blob already stored with the same size is not uploaded again. With `owner`, its
        marker is written first (see `OwnedBlobs.delete_unless_owned`).

        Raises:
            BlobStoreUnavailable: the bucket could not be reached or refused the write.
            ValueError: `owner` is empty.
        """
        data = bytes(data)
        name = marker_name(owner) if owner is not None else None
        # Hashing megabytes takes milliseconds: off the event loop.
        digest = await asyncio.to_thread(_sha256, data)
        with self._outage("written"):
            if owner is not None and name is not None:
                # Written anew even when it exists: a cleanup deleting the blob sees it change.
                await obstore.put_async(self._store, _marker_key(digest, name), marker_body(owner))
            key = _key(digest)
            if await self._stored_size(key) != len(data):
                await obstore.put_async(self._store, key, data)
        return ref_for(digest)

    async def get(self, ref: str, offset: int = 0, length: int | None = None) -> bytes:
        """Up to `length` bytes of the blob from `offset` (all the rest when `length` is None),
        by a ranged GET.

        A slice that runs past the end is cut short; one that starts past it is empty.

        Raises:
            BlobNotFound: nothing is stored under `ref` in this bucket and prefix.
            BlobStoreUnavailable: the bucket could not be reached or refused the read.
            ValueError: `ref` is not a blob reference, or `offset`/`length` is negative.
        """
        key = _key(parse_ref(ref))
        if offset < 0:
            raise ValueError(f"offset must be 0 or more, got {offset}")
        if length is not None and length < 0:
            raise ValueError(f"length must be 0 or more, got {length}")
        if length == 0:  # HTTP has no empty range; the blob must still exist
            await self.size(ref)
            return b""
        options: GetOptions = {}
        if length is not None:
            options["range"] = (offset, offset + length)
        elif offset:
            options["range"] = {"offset": offset}
        with self._outage("read"):
            return await self._get(ref, key, offset, options)

    async def _get(self, ref: str, key: str, offset: int, options: GetOptions) -> bytes:
        try:
            result = await obstore.get_async(self._store, key, options=options)
            return bytes(await result.bytes_async())
        except _MISSING:
            # A blob a cleanup has set aside for a moment is still readable (see
            # OwnedBlobs.delete_unless_owned); only a miss pays for the look.
            for aside in await self._aside_keys(parse_ref(ref)):
                with contextlib.suppress(*_MISSING):
                    result = await obstore.get_async(self._store, aside, options=options)
                    return bytes(await result.bytes_async())
            raise self._not_found(ref) from None
        except ObstoreError:
            # A range that starts at or past the end is refused (416), where a file read
            # returns nothing; the store's answer for it is the empty slice.
            if "range" in options and await self.size(ref) <= offset:
                return b""
            raise

    async def size(self, ref: str) -> int:
        """The blob's size in bytes, by a HEAD.

        Raises:
            BlobNotFound: nothing is stored under `ref` in this bucket and prefix.
            BlobStoreUnavailable: the bucket could not be reached or refused the read.
            ValueError: `ref` is not a blob reference.
        """
        digest = parse_ref(ref)
        with self._outage("read"):
            size = await self._stored_size(_key(digest))
            for aside in await self._aside_keys(digest) if size is None else []:
                if (size := await self._stored_size(aside)) is not None:
                    break
        if size is None:
            raise self._not_found(ref)
        return size

    async def delete(self, ref: str) -> bool:
        """Remove the blob; True if it was stored, False if there was nothing to remove.

        Raises:
            ValueError: `ref` is not a blob reference.
        """
        key = _key(parse_ref(ref))
        # S3's DELETE answers the same whether or not the object existed: a HEAD tells.
        if await self._stored_size(key) is None:
            return False
        await obstore.delete_async(self._store, key)
        return True

    async def refs(self) -> AsyncIterator[tuple[str, datetime]]:
        """Every stored blob's reference with when it was last written (UTC), in no set order.

        Other objects under the prefix (including those of a store at a longer prefix) are
        skipped. The bucket is listed a page at a time.
        """
        async for page in obstore.list(self._store, chunk_size=1000):
            for meta in page:
                fanout, _, rest = meta["path"].partition("/")
                if len(fanout) != 2:
                    continue
                try:
                    ref = ref_for(fanout + rest)
                except ValueError:  # not a blob's key
                    continue
                yield ref, meta["last_modified"]

    async def put_record(self, name: str, data: bytes) -> bool:
        """Write the record `name` (the object `<prefix>/records/<name>`) unless it exists;
        whether this call wrote it. One conditional PUT (`If-None-Match: *`): of racing
        writers, the bucket lets one win.

        Raises:
            BlobStoreUnavailable: the bucket could not be reached or refused the write.
            ValueError: `name` is not a record name.
        """
        key = f"{RECORDS_DIR}/{check_record_name(name)}"
        with self._outage("written"):
            try:
                await obstore.put_async(self._store, key, bytes(data), mode="create")
            except (AlreadyExistsError, PreconditionError):
                return False
        return True

    async def get_record(self, name: str) -> bytes | None:
        """The record `name`, or None if it was never written.

        Raises:
            BlobStoreUnavailable: the bucket could not be reached.
            ValueError: `name` is not a record name.
        """
        key = f"{RECORDS_DIR}/{check_record_name(name)}"
        with self._outage("read"):
            try:
                result = await obstore.get_async(self._store, key)
            except _MISSING:
                return None
            return bytes(await result.bytes_async())

    async def _aside_keys(self, digest: str) -> list[str]:
        # Listing prefixes are whole path segments: the trash is listed, and it is small
        # (blobs being deleted this moment, and any a dead cleanup left).
        return [key async for name, key in self._trash() if name.startswith(digest + ".")]

    async def _trash(self) -> AsyncIterator[tuple[str, str]]:
        async for page in obstore.list(self._store, TRASH_DIR, chunk_size=1000):
            for meta in page:
                yield meta["path"].rsplit("/", 1)[-1], meta["path"]

    # --- the primitives of OwnedBlobs --------------------------------------------------------

    async def _markers(self, digest: str) -> dict[str, Hashable]:
        found: dict[str, Hashable] = {}
        async for page in obstore.list(self._store, f"{OWNERS_DIR}/{digest}", chunk_size=1000):
            for meta in page:
                # Every PUT of a marker changes its ETag (its body is unique to the write).
                found[meta["path"].rsplit("/", 1)[-1]] = (meta["last_modified"], meta["e_tag"])
        return found

    async def _read_marker(self, digest: str, name: str) -> str | None:
        try:
            result = await obstore.get_async(self._store, _marker_key(digest, name))
            return owner_from_body(bytes(await result.bytes_async()))
        except _MISSING:
            return None

    async def _remove_marker(self, digest: str, name: str) -> None:
        await obstore.delete_async(self._store, _marker_key(digest, name))

    async def _stored(self, digest: str) -> bool:
        return await self._stored_size(_key(digest)) is not None

    async def _move_aside(self, digest: str) -> tuple[str, int] | None:
        key = _key(digest)
        size = await self._stored_size(key)
        if size is None:
            return None
        name = aside_name(digest)
        try:
            await obstore.copy_async(self._store, key, f"{TRASH_DIR}/{name}")
        except _MISSING:  # another cleanup deleted it first
            return None
        await obstore.delete_async(self._store, key)
        return name, size

    async def _put_back(self, digest: str, name: str) -> None:
        # Over a copy a racing put wrote meanwhile, if any: the same bytes.
        await obstore.copy_async(self._store, f"{TRASH_DIR}/{name}", _key(digest))
        await obstore.delete_async(self._store, f"{TRASH_DIR}/{name}")

    async def _drop(self, name: str) -> None:
        await obstore.delete_async(self._store, f"{TRASH_DIR}/{name}")

    async def _aside(self) -> AsyncIterator[tuple[str, str, float]]:
        async for name, _ in self._trash():
            if (parsed := parse_aside(name)) is not None:
                yield name, *parsed

    async def _stored_size(self, key: str) -> int | None:
        try:
            meta = await obstore.head_async(self._store, key)
        except _MISSING:
            return None
        return meta["size"]

    @contextlib.contextmanager
    def _outage(self, done: str) -> Iterator[None]:
        """What the client raises when the bucket cannot be reached or refuses (after its own
        few quick retries), as the outage it is; a missing blob stays BlobNotFound."""
        try:
            yield
        except (BlobNotFound, BlobStoreUnavailable):
            raise
        except (ObstoreError, OSError) as err:
            # The client's messages run over many lines (its chain of causes): the first says it.
            first = (str(err).strip() or type(err).__name__).splitlines()[0]
            raise BlobStoreUnavailable(
                f"the object store {self.url} could not be {done}: {first}"
            ) from err

    def _not_found(self, ref: str) -> BlobNotFound:
        return BlobNotFound(
            f"no blob stored under {ref} in the object store {self.url}; {SHARE_ONE_STORE} "
            "(the same WAITSTATE_BLOB_URL and AWS_ENDPOINT_URL everywhere)"
        )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key(digest: str) -> str:
    return f"{digest[:2]}/{digest[2:]}"


def _marker_key(digest: str, name: str) -> str:
    return f"{OWNERS_DIR}/{digest}/{name}"
