"""Owner markers and the safe delete, on the directory store and on S3 (moto over HTTP): who owns
a blob, marker names for any id, and a delete that a put racing it can never undo."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path

import obstore
import pytest

from tests.blobs.conftest import S3Server
from waitstate.blobs import LocalBlobStore, parse_ref
from waitstate.blobs.owners import MAX_NAME, marker_name, owner_from_name
from waitstate.blobs.s3 import S3BlobStore

DATA = b"a listing two runs share"
SIZE = len(DATA)
BASE32 = set("abcdefghijklmnopqrstuvwxyz234567")
Store = LocalBlobStore | S3BlobStore


async def _never(owners: list[str]) -> bool:
    return False


async def _listed(store: Store) -> list[str]:
    return [ref async for ref, _ in store.refs()]


# --- marker names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "owner", ["run-1", "tenant/a/run-2", "Run-A", "run-a", "exports ✓ 日本", "x" * 125, "%2F..//"]
)
def test_a_marker_name_is_file_and_key_safe_and_spells_its_owner(owner: str) -> None:
    name = marker_name(owner)

    assert set(name) <= BASE32 and 0 < len(name) <= MAX_NAME
    assert owner_from_name(name) == owner


def test_ids_that_differ_in_case_only_get_names_that_differ_in_case_insensitive_terms() -> None:
    # On a case-insensitive file system (macOS, Windows) these would otherwise be one file.
    assert marker_name("Run-A").lower() != marker_name("run-a").lower()


def test_a_long_id_is_named_by_its_hash() -> None:
    owner = "r" * 500
    name = marker_name(owner)

    assert name == "~" + hashlib.sha256(owner.encode()).hexdigest()
    assert owner_from_name(name) is None  # read from the marker itself


def test_an_empty_owner_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty workflow id"):
        marker_name("")


# --- owners ------------------------------------------------------------------------------------


async def test_each_put_for_a_run_records_it_once(store: Store) -> None:
    ref = await store.put(DATA, owner="run-1")
    assert await store.put(DATA, owner="tenant/run-2") == ref
    await store.put(DATA, owner="run-1")
    await store.put(DATA)  # for no run: records nobody

    assert sorted(await store.owners(ref)) == ["run-1", "tenant/run-2"]
    assert await store.get(ref) == DATA


async def test_a_long_owner_id_is_read_back_whole(store: Store) -> None:
    owner = "wf-" + "x" * 600
    ref = await store.put(DATA, owner=owner)

    assert await store.owners(ref) == [owner]


async def test_a_blob_put_for_no_run_has_no_owners(store: Store) -> None:
    assert await store.owners(await store.put(DATA)) == []


async def test_disown_forgets_one_owner(store: Store) -> None:
    ref = await store.put(DATA, owner="run-1")
    await store.put(DATA, owner="run-2")

    assert await store.disown(ref, "run-1") is True
    assert await store.disown(ref, "run-1") is False
    assert await store.owners(ref) == ["run-2"]


async def test_markers_and_set_aside_blobs_are_never_listed_as_blobs(store: Store) -> None:
    kept = await store.put(b"kept", owner="run-1")
    aside = await store.put(DATA, owner="run-2")
    assert await store._move_aside(parse_ref(aside)) is not None

    assert await _listed(store) == [kept]


# --- the safe delete ----------------------------------------------------------------------------


async def test_a_blob_its_owners_no_longer_need_goes_with_its_markers(store: Store) -> None:
    ref = await store.put(DATA, owner="run-1")
    await store.put(DATA, owner="run-2")
    seen: list[list[str]] = []

    async def keep(owners: list[str]) -> bool:
        seen.append(sorted(owners))
        return False

    assert await store.delete_unless_owned(ref, keep) == SIZE

    assert seen == [["run-1", "run-2"]]
    assert await _listed(store) == []
    assert await store.owners(ref) == []
    assert [name async for name in store._aside()] == []


async def test_a_blob_an_owner_needs_stays(store: Store) -> None:
    ref = await store.put(DATA, owner="run-1")

    async def keep(owners: list[str]) -> bool:
        return True

    assert await store.delete_unless_owned(ref, keep) is None
    assert await store.get(ref) == DATA
    assert await store.owners(ref) == ["run-1"]


async def test_a_blob_gone_already_is_not_counted_twice(store: Store) -> None:
    ref = await store.put(DATA, owner="run-1")
    assert await store.delete_unless_owned(ref, _never) == SIZE

    assert await store.delete_unless_owned(ref, _never) is None


async def test_a_put_for_a_new_run_while_the_delete_decides_keeps_the_blob(store: Store) -> None:
    # The race the protocol is for: a new run writes the same bytes after the delete read the
    # owners, and finds the blob still stored, so it writes only its marker; the delete then
    # sets the blob aside. Seeing the new marker, it puts the blob back.
    ref = await store.put(DATA, owner="ended-run")

    async def keep(owners: list[str]) -> bool:
        assert await store.put(DATA, owner="new-run") == ref
        return False

    assert await store.delete_unless_owned(ref, keep) is None

    assert await store.get(ref) == DATA
    assert sorted(await store.owners(ref)) == ["ended-run", "new-run"]
    assert await _listed(store) == [ref]
    assert [name async for name in store._aside()] == []


async def test_a_put_under_a_reused_workflow_id_keeps_the_blob_too(store: Store) -> None:
    # A new run under the id of the ended one: its marker exists already, but is written anew.
    ref = await store.put(DATA, owner="run-1")

    async def keep(owners: list[str]) -> bool:
        await store.put(DATA, owner="run-1")
        return False

    assert await store.delete_unless_owned(ref, keep) is None
    assert await store.get(ref) == DATA


async def test_a_put_after_the_blob_was_set_aside_writes_it_again(store: Store) -> None:
    # A put whose marker comes after the delete's second look finds no blob, and writes it.
    ref = await store.put(DATA, owner="ended-run")
    digest = parse_ref(ref)
    aside = await store._move_aside(digest)
    assert aside is not None

    assert await store.put(DATA, owner="new-run") == ref

    assert await store.get(ref) == DATA
    assert await store._stored(digest)


async def test_a_blob_set_aside_for_a_moment_is_still_readable(store: Store) -> None:
    ref = await store.put(DATA, owner="run-1")
    assert await store._move_aside(parse_ref(ref)) is not None

    assert await store.get(ref, 2, 7) == DATA[2:9]
    assert await store.size(ref) == SIZE


async def test_recover_puts_back_what_a_dead_cleanup_left_for_an_owner_and_drops_the_rest(
    store: Store,
) -> None:
    needed = await store.put(b"still needed", owner="open-run")
    unneeded = await store.put(b"not needed", owner="ended-run")
    for ref in (needed, unneeded):
        assert await store._move_aside(parse_ref(ref)) is not None

    async def keep(owners: list[str]) -> bool:
        return "open-run" in owners

    # A young set-aside blob may be a live cleanup's: left alone.
    assert await store.recover(keep) == 0
    assert len([name async for name in store._aside()]) == 2

    assert await store.recover(keep, older_than=timedelta(0)) == 1

    assert await store.get(needed) == b"still needed"
    assert await store.owners(needed) == ["open-run"]
    assert await _listed(store) == [needed]
    assert await store.owners(unneeded) == []
    assert [name async for name in store._aside()] == []


async def test_an_s3_marker_is_an_object_under_owners(s3_server: S3Server, prefix: str) -> None:
    ref = await s3_server.store(prefix).put(DATA, owner="tenant/run-1")

    keys = [
        meta["path"]
        async for page in obstore.list(s3_server.bucket_store(), prefix)
        for meta in page
    ]
    digest = parse_ref(ref)
    assert sorted(keys) == [
        f"{prefix}/{digest[:2]}/{digest[2:]}",
        f"{prefix}/owners/{digest}/{marker_name('tenant/run-1')}",
    ]


async def test_a_directory_marker_is_a_file_under_owners(tmp_path: Path) -> None:
    ref = await LocalBlobStore(tmp_path).put(DATA, owner="tenant/run-1")

    marker = tmp_path / "owners" / parse_ref(ref) / marker_name("tenant/run-1")
    assert marker.read_text().splitlines()[0] == "tenant/run-1"
