"""A content-addressed blob store: bytes are kept under their SHA-256 and named by a reference.

A blob's reference is `ref://blobs/<sha256 hex>`. Because the name is derived from the content,
writing is idempotent (the same bytes always get the same reference, and writing them twice
is harmless) and a reference can never point at different bytes later.

`BlobStore` is the whole interface: put, get a slice, size, and (for a cleanup) delete and list,
each blob's owners (the runs it was written for) and a delete that no racing put can undo
(`waitstate.blobs.owners`). Beside the blobs, a store keeps *records*: small values under names
of the caller's choosing, each written once (the first write wins, atomically, and every later
one is refused), for state that workers must find by name and never overwrite, such as the
rounds of an MCP call that asks for input (`waitstate.mcp.rounds`). Records are not blobs: no
reference names them, `refs` does not list them and the cleanup never deletes them.
`LocalBlobStore` (`waitstate.blobs.local`) keeps blobs in a directory; `S3BlobStore`
(`waitstate.blobs.s3`) in S3-compatible object storage, with the digest as the object key and
ranged GETs for slices. Both name a blob by the same reference. What matters is that every
worker of a deployment reaches the same store: a run's history holds only references, so a
shared store is what lets any worker resume any run, including one another worker started
before it crashed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Protocol

from waitstate.blobs.owners import STALE_ASIDE, Keep

__all__ = ["BlobStore"]


class BlobStore(Protocol):
    """Where large values live, named by the SHA-256 of their bytes."""

    async def put(self, data: bytes, owner: str | None = None) -> str:
        """Store `data` and return its reference; the same bytes always get the same one.

        `owner` (a run's workflow id) is recorded as one of the blob's owners before the blob
        is written, so a cleanup keeps the blob while that run may still read it.

        Raises:
            BlobStoreUnavailable: the store could not be written (an outage: try again later).
        """
        ...

    async def get(self, ref: str, offset: int = 0, length: int | None = None) -> bytes:
        """Up to `length` bytes of the blob from `offset` (all the rest when `length` is None).

        A slice that runs past the end is cut short; one that starts past it is empty.

        Raises:
            BlobNotFound: nothing is stored under `ref`.
            BlobStoreUnavailable: the store could not be read (an outage: try again later).
            ValueError: `ref` is not a blob reference, or `offset`/`length` is negative.
        """
        ...

    async def size(self, ref: str) -> int:
        """The blob's size in bytes.

        Raises:
            BlobNotFound: nothing is stored under `ref`.
            BlobStoreUnavailable: the store could not be read (an outage: try again later).
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

        What else lives in the store's directory or under its prefix is skipped, owner
        markers and blobs set aside by a cleanup included.
        """
        ...

    async def owners(self, ref: str) -> list[str]:
        """The workflow ids the blob was written for, in no set order ([] when none)."""
        ...

    async def disown(self, ref: str, owner: str) -> bool:
        """Forget that `owner` owns the blob; True if it did."""
        ...

    async def delete_unless_owned(self, ref: str, keep: Keep) -> int | None:
        """Delete the blob and its owner markers unless `keep(owners)` is true or a put for a
        new owner races the delete; the bytes freed, or None if the blob stays (see
        `OwnedBlobs.delete_unless_owned` for why no racing put is lost)."""
        ...

    async def recover(self, keep: Keep, older_than: timedelta = STALE_ASIDE) -> int:
        """Settle the blobs a cleanup set aside and never decided on (it died): put back what
        `keep` keeps, delete the rest; how many were put back."""
        ...

    async def put_record(self, name: str, data: bytes) -> bool:
        """Write the record `name` unless it exists; whether this call wrote it. Of writers that
        race, exactly one wins; a record is never changed once written.

        Raises:
            BlobStoreUnavailable: the store could not be written (an outage: try again later).
            ValueError: `name` is not a record name (`check_record_name`).
        """
        ...

    async def get_record(self, name: str) -> bytes | None:
        """The record `name`, or None if it was never written.

        Raises:
            BlobStoreUnavailable: the store could not be read (an outage: try again later).
            ValueError: `name` is not a record name.
        """
        ...
