"""Who a blob belongs to, and deleting a blob only when none of its owners still needs it.

Blobs are content-addressed, so one blob can belong to many runs: two runs that list the same
MCP tools, or get the same large result, write the same bytes under the same digest. Each put
made for a run leaves an *owner marker* for the pair (blob, the run's workflow id); a cleanup
asks Temporal about each owner before it deletes anything, and never deletes a blob with no
marker at all (one written before markers existed, or by a put made for no run).

A marker's name is the owner id in lowercase base32 (no padding): it can hold any id (`/`
included) and stays distinct on case-insensitive file systems, where ids that differ only in
case would otherwise share one file. An id whose name would be too long for a file name or an
object key is named by its SHA-256 instead (`~<hex>`), and the marker's content holds the id;
every marker holds its owner id (and a line unique to its write), so the store reads by hand.

`OwnedBlobs` holds the deletion protocol once, over a few primitives each store implements.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from datetime import timedelta

from waitstate.blobs.refs import DIGEST, parse_ref

OWNERS_DIR = "owners"
TRASH_DIR = "trash"
# Past this many characters a marker is named by the id's hash: file names stop at 255 bytes,
# and an object key (1,024 bytes) must also hold the prefix and the digest.
MAX_NAME = 200
HASHED = "~"
# A blob set aside longer than this is one a cleanup left behind (it crashed between moving it
# and deciding); a delete takes milliseconds, so a younger one may be a live cleanup's.
STALE_ASIDE = timedelta(hours=1)

# Given a blob's owners (workflow ids), whether to keep it. Called with [] for a blob no run
# owns; a cleanup keeps those.
Keep = Callable[[list[str]], Awaitable[bool]]


def marker_name(owner: str) -> str:
    """The name of `owner`'s marker: its UTF-8 in lowercase base32, or `~<sha256>` if long.

    Raises:
        ValueError: `owner` is empty.
    """
    if not owner:
        raise ValueError("a blob's owner must be a non-empty workflow id")
    data = owner.encode()
    name = base64.b32encode(data).decode().rstrip("=").lower()
    if len(name) > MAX_NAME:
        return HASHED + hashlib.sha256(data).hexdigest()
    return name


def owner_from_name(name: str) -> str | None:
    """The owner a marker's name spells, or None when it is a hash (read the marker) or is not
    a marker's name at all."""
    if not name or name.startswith(HASHED):
        return None
    try:
        return base64.b32decode(name.upper() + "=" * (-len(name) % 8)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def marker_body(owner: str) -> bytes:
    """What a marker holds: its owner's id, then a line unique to this write, so that writing
    it anew changes it even within one second (S3 dates objects to the second; its ETag is the
    MD5 of the body)."""
    return f"{owner}\n{uuid.uuid4().hex}".encode()


def owner_from_body(body: bytes) -> str:
    """The owner id a marker holds."""
    return body.decode().split("\n", 1)[0]


def aside_name(digest: str) -> str:
    """A fresh name for `digest`'s blob set aside: unique to this delete, and dated (ns)."""
    return f"{digest}.{time.time_ns()}.{uuid.uuid4().hex[:12]}"


def parse_aside(name: str) -> tuple[str, float] | None:
    """The digest and the time (epoch seconds) of a set-aside name, or None if it is not one."""
    digest, _, rest = name.partition(".")
    stamp, _, unique = rest.partition(".")
    if not DIGEST.fullmatch(digest) or not stamp.isdigit() or not unique:
        return None
    return digest, int(stamp) / 1e9


class OwnedBlobs(ABC):
    """Owner markers and the safe delete, over a store's primitives.

    A store keeps, beside its blobs, `owners/<digest>/<marker name>` (one per owner) and
    `trash/<digest>.<ns>.<unique>` (a blob a cleanup has set aside while it decides); neither
    is ever listed as a blob.
    """

    async def owners(self, ref: str) -> list[str]:
        """The workflow ids that own the blob (any order; [] when none does).

        Raises:
            ValueError: `ref` is not a blob reference.
        """
        digest = parse_ref(ref)
        return await self._owners_of(digest, await self._markers(digest))

    async def disown(self, ref: str, owner: str) -> bool:
        """Remove `owner`'s marker of the blob; True if there was one.

        Raises:
            ValueError: `ref` is not a blob reference, or `owner` is empty.
        """
        digest = parse_ref(ref)
        name = marker_name(owner)
        if name not in await self._markers(digest):
            return False
        await self._remove_marker(digest, name)
        return True

    async def delete_unless_owned(self, ref: str, keep: Keep) -> int | None:
        """Delete the blob and its markers unless `keep(owners)` says to keep it, or an owner
        writes it while it is being deleted. Returns the bytes freed, or None if it stays.

        Why no put is lost: a put writes its owner's marker (always anew, so that a marker
        that already existed changes too) and only then looks whether the blob is stored.
        This delete reads the markers (A), asks `keep`, sets the blob aside (moved to the
        trash, so nothing can read it under its name), and reads the markers again (B). A put
        racing it is in one of three places:

        - its marker was written before A: `keep` sees that owner (and asks Temporal about it
          after A, so a run started since it last asked is seen running) and keeps the blob;
        - its marker was written between A and B: B differs from A and the blob is put back,
          whatever the owner (keeping is always safe; the next cleanup decides again);
        - its marker was written after B: its look for the blob comes after the blob was set
          aside, so it finds nothing and writes the blob itself.

        In no order does a blob vanish under a put that returned its reference. A reader that
        falls in the short window between setting aside and putting back reads the set-aside
        copy. A cleanup that dies after setting a blob aside leaves it in the trash, where
        `recover` finds it. The one loss is on the safe side: a put that re-writes a marker
        after B, of an owner this delete drops, leaves a blob with no marker, which is kept.

        Raises:
            ValueError: `ref` is not a blob reference.
        """
        digest = parse_ref(ref)
        before = await self._markers(digest)
        if await keep(await self._owners_of(digest, before)):
            return None
        aside = await self._move_aside(digest)
        if aside is None:  # gone already (another cleanup)
            return None
        name, size = aside
        after = await self._markers(digest)
        if after != before:
            await self._put_back(digest, name)
            return None
        # The blob first, then its markers: a crash in between leaves markers of no blob,
        # which cost a few bytes, never a blob that no marker protects.
        await self._drop(name)
        for marker in after:
            await self._remove_marker(digest, marker)
        return size

    async def recover(self, keep: Keep, older_than: timedelta = STALE_ASIDE) -> int:
        """Finish what cleanups that died left in the trash: each blob set aside more than
        `older_than` ago is put back if `keep(owners)` says so (or if a put wrote it anew),
        else deleted with its markers. Returns how many were put back."""
        restored = 0
        cutoff = time.time() - older_than.total_seconds()
        async for name, digest, when in self._aside():
            if when > cutoff:
                continue
            if await self._stored(digest):
                await self._drop(name)  # a put wrote it anew
                continue
            markers = await self._markers(digest)
            if await keep(await self._owners_of(digest, markers)):
                await self._put_back(digest, name)
                restored += 1
                continue
            await self._drop(name)
            for marker in markers:
                await self._remove_marker(digest, marker)
        return restored

    async def _owners_of(self, digest: str, markers: dict[str, Hashable]) -> list[str]:
        owners = []
        for name in markers:
            owner = owner_from_name(name)
            if owner is None and name.startswith(HASHED):
                owner = await self._read_marker(digest, name)
            if owner:
                owners.append(owner)
        return owners

    # --- what each store implements ---------------------------------------------------------

    @abstractmethod
    async def _markers(self, digest: str) -> dict[str, Hashable]:
        """The blob's markers: name -> a version that changes whenever the marker is written."""

    @abstractmethod
    async def _read_marker(self, digest: str, name: str) -> str | None:
        """The owner id a marker holds (None if it is gone)."""

    @abstractmethod
    async def _remove_marker(self, digest: str, name: str) -> None:
        """Remove a marker (nothing if it is gone)."""

    @abstractmethod
    async def _stored(self, digest: str) -> bool:
        """Whether the blob is stored under its name."""

    @abstractmethod
    async def _move_aside(self, digest: str) -> tuple[str, int] | None:
        """Move the blob into the trash, under `aside_name(digest)`: that name and the blob's
        size, or None if it is not stored."""

    @abstractmethod
    async def _put_back(self, digest: str, name: str) -> None:
        """Move the set-aside blob back under its name (same bytes: overwriting a copy a put
        wrote meanwhile is harmless), and out of the trash."""

    @abstractmethod
    async def _drop(self, name: str) -> None:
        """Delete a set-aside blob (nothing if it is gone)."""

    @abstractmethod
    def _aside(self) -> AsyncIterator[tuple[str, str, float]]:
        """Every set-aside blob: its trash name, digest, and when it was set aside (epoch s)."""
