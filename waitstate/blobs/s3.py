"""Blobs in S3-compatible object storage (AWS S3, MinIO, R2, GCS through its S3 API...).

The same content addressing and references as `LocalBlobStore`: a blob is the object
`<prefix>/<first 2 hex of its sha256>/<the other 62>` in one bucket, so a run reads its
references the same way whichever store wrote them. The S3 protocol is `obstore`'s (Rust's
`object_store`, async, with ranged GETs), never written by hand here.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import BaseError as ObstoreError
from obstore.exceptions import NotFoundError
from obstore.store import S3Store

from waitstate.blobs.store import SHARE_ONE_STORE, BlobNotFound, BlobStore, parse_ref, ref_for

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


class S3BlobStore(BlobStore):
    """Blobs as objects in an S3 bucket, under a key prefix.

    Credentials and region come from the usual AWS environment (`AWS_ACCESS_KEY_ID`,
    `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` or `AWS_DEFAULT_REGION`, web
    identity, instance metadata), read by the client itself; so is `AWS_ENDPOINT_URL` when
    `endpoint` is not given.

    An object is written whole by one PUT, so no reader ever sees part of a blob, and puts of
    the same blob by concurrent workers write the same bytes under the same key.

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

    async def put(self, data: bytes) -> str:
        """Store `data` and return its reference; the same bytes always get the same one.

        A blob already stored with the same size is not uploaded again.
        """
        data = bytes(data)
        # Hashing megabytes takes milliseconds: off the event loop.
        digest = await asyncio.to_thread(_sha256, data)
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
        try:
            result = await obstore.get_async(self._store, key, options=options)
            return bytes(await result.bytes_async())
        except _MISSING:
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
            ValueError: `ref` is not a blob reference.
        """
        size = await self._stored_size(_key(parse_ref(ref)))
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

    async def _stored_size(self, key: str) -> int | None:
        try:
            meta = await obstore.head_async(self._store, key)
        except _MISSING:
            return None
        return meta["size"]

    def _not_found(self, ref: str) -> BlobNotFound:
        return BlobNotFound(
            f"no blob stored under {ref} in the object store {self.url}; {SHARE_ONE_STORE} "
            "(the same WAITSTATE_BLOB_URL and AWS_ENDPOINT_URL everywhere)"
        )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key(digest: str) -> str:
    return f"{digest[:2]}/{digest[2:]}"
