"""A store that cannot be read or written says so as `BlobStoreUnavailable` (an outage to wait
out), never as a missing blob; what the run's activities make of it: a tool's result that only
travels by reference to spare the history goes inline instead, a result too large for the
history fails the call as `BlobStoreUnavailable`, read_ref tells the model to try later.
(A whole run waiting an outage out: tests/workflows/test_store_outages.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.testing import ActivityEnvironment

from waitstate.activities import ToolActivities
from waitstate.activities.tools import INLINE_RESULT_BYTES
from waitstate.blobs import BlobNotFound, BlobStoreUnavailable, LocalBlobStore, ref_for
from waitstate.blobs.results import DEFAULT_THRESHOLD
from waitstate.blobs.s3 import S3BlobStore
from waitstate.schemas import ToolCall, ToolCallInput
from waitstate.schemas.errors import BLOB_STORE_UNAVAILABLE
from waitstate.tools import ToolRegistry, ToolSpec
from waitstate.tools.read_ref import read_ref_tool

MISSING = ref_for("0" * 64)


def _away(path: Path) -> None:
    """Make `path` a file (root ignores permission bits: no chmod would stop its writes)."""
    path.rename(path.with_name(path.name + ".away"))
    path.write_text("not a directory")


async def test_a_store_that_cannot_be_written_is_unavailable_and_still_read(
    tmp_path: Path,
) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    ref = await store.put(b"kept", "run-1")
    _away(store.root / "owners")  # every write begins with its owner's marker

    with pytest.raises(BlobStoreUnavailable) as refused:
        await store.put(b"new", "run-1")

    assert isinstance(refused.value, OSError)
    assert str(refused.value).startswith(f"the directory store {store.root} could not be written")
    assert await store.get(ref) == b"kept"
    with pytest.raises(BlobNotFound):  # a missing blob is still just that
        await store.get(MISSING)


async def test_a_store_that_cannot_be_reached_is_unavailable_not_empty(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    ref = await store.put(b"kept", "run-1")
    _away(store.root)

    for attempt in (store.get(ref), store.get(MISSING), store.size(ref), store.put(b"x", "r")):
        with pytest.raises(BlobStoreUnavailable, match="could not be (read|written)"):
            await attempt


async def test_object_storage_out_of_reach_is_unavailable_in_one_line(closed_port: int) -> None:
    store = S3BlobStore(
        "waitstate-test",
        "outage",
        endpoint=f"http://127.0.0.1:{closed_port}",
        config={"access_key_id": "t", "secret_access_key": "t", "region": "us-east-1"},
    )

    for attempt in (store.put(b"x", "run-1"), store.get(MISSING), store.size(MISSING)):
        with pytest.raises(BlobStoreUnavailable) as refused:
            await attempt
        message = str(refused.value)
        assert message.startswith(f"the object store {store.url} could not be")
        assert "\n" not in message


class _Size(BaseModel):
    size: int


async def _text(args: _Size) -> str:
    return "y" * args.size


def _call(size: int) -> ToolCallInput:
    arguments = json.dumps({"size": size})
    return ToolCallInput(call=ToolCall(id="call_1", name="text", arguments=arguments))


async def test_a_tool_result_travels_inline_when_its_reference_cannot_be_written(
    tmp_path: Path,
) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    await store.put(b"the store exists", "run-1")
    _away(store.root / "owners")
    tools = ToolActivities(
        ToolRegistry([ToolSpec(name="text", description="d", args=_Size, handler=_text)]), store
    )
    env = ActivityEnvironment()

    # Past 1 KB a result goes by reference only to spare the history a second copy.
    inline = await env.run(tools.call_tool, _call(INLINE_RESULT_BYTES + 1))
    # Past the shrink threshold it is too large for the history: the call fails, typed by
    # the error's class (what the SDK names an activity's failure after), and is retried.
    with pytest.raises(BlobStoreUnavailable):
        await env.run(tools.call_tool, _call(DEFAULT_THRESHOLD + 1))

    assert inline.content == "y" * (INLINE_RESULT_BYTES + 1) and inline.content_ref is None
    assert BlobStoreUnavailable.__name__ == BLOB_STORE_UNAVAILABLE


async def test_read_ref_tells_the_model_to_try_later(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    ref = await store.put(b"0123456789", "run-1")
    _away(store.root)
    call = ToolCall(id="call_1", name="read_ref", arguments=json.dumps({"ref": ref}))

    result = await ToolRegistry([read_ref_tool(store)]).run(call)

    assert result.is_error
    assert result.content.startswith(f"{ref} cannot be read just now")
    assert "try again later" in result.content
