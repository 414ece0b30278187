"""The read_ref tool through a ToolRegistry, over a LocalBlobStore."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.upstream import pydantic_error
from waitstate.blobs import REF_PREFIX, LocalBlobStore, shrink
from waitstate.schemas import ToolCall, ToolResult
from waitstate.schemas.builtin import ReadRefArgs
from waitstate.tools.read_ref import read_ref_tool
from waitstate.tools.spec import ToolRegistry

UNKNOWN = REF_PREFIX + "0" * 64


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


@pytest.fixture
def registry(store: LocalBlobStore) -> ToolRegistry:
    return ToolRegistry([read_ref_tool(store)])


async def read(registry: ToolRegistry, **arguments: Any) -> ToolResult:
    call = ToolCall(id="call_1", name="read_ref", arguments=json.dumps(arguments))
    result = await registry.run(call)
    assert (result.tool_call_id, result.name) == ("call_1", "read_ref")
    return result


async def test_a_slice(registry: ToolRegistry, store: LocalBlobStore) -> None:
    ref = await store.put(b"0123456789" * 1_000)

    result = await read(registry, ref=ref, offset=5, length=12)

    assert result.is_error is False
    assert json.loads(result.content) == {
        "ref": ref,
        "offset": 5,
        "length": 12,
        "total_bytes": 10_000,
        "text": "567890123456",
    }


async def test_the_default_slice_is_4000_bytes_from_the_start(
    registry: ToolRegistry, store: LocalBlobStore
) -> None:
    data = bytes(range(97, 123)) * 1_000
    ref = await store.put(data)

    answer = json.loads((await read(registry, ref=ref)).content)

    assert (answer["offset"], answer["length"], answer["text"]) == (0, 4_000, data[:4_000].decode())


async def test_the_last_slice_is_cut_short(registry: ToolRegistry, store: LocalBlobStore) -> None:
    ref = await store.put(b"0123456789")

    answer = json.loads((await read(registry, ref=ref, offset=7, length=100)).content)

    assert (answer["length"], answer["text"], answer["total_bytes"]) == (3, "789", 10)


async def test_a_cut_character_reads_as_a_replacement(
    registry: ToolRegistry, store: LocalBlobStore
) -> None:
    ref = await store.put("aé".encode())  # b"a\xc3\xa9"

    answer = json.loads((await read(registry, ref=ref, offset=0, length=2)).content)

    assert answer["text"] == "a\ufffd"


async def test_an_empty_blob_reads_as_empty(registry: ToolRegistry, store: LocalBlobStore) -> None:
    ref = await store.put(b"")

    answer = json.loads((await read(registry, ref=ref)).content)

    assert (answer["length"], answer["total_bytes"], answer["text"]) == (0, 0, "")


async def test_reading_a_shrunk_result_back_whole(
    registry: ToolRegistry, store: LocalBlobStore
) -> None:
    text = "".join(f"row {i}: ✓\n" for i in range(5_000))
    shrunk = await shrink(store, text)
    match = re.search(r"the full result is (ref://blobs/[0-9a-f]{64});", shrunk)
    assert match is not None

    chunks, offset, total = [], 0, None
    while total is None or offset < total:
        answer = json.loads(
            (await read(registry, ref=match[1], offset=offset, length=65_536)).content
        )
        chunks.append(answer["text"])
        offset, total = offset + answer["length"], answer["total_bytes"]

    assert "".join(chunks).encode() == text.encode()
    assert total == len(text.encode())


async def test_unknown_ref(registry: ToolRegistry) -> None:
    result = await read(registry, ref=UNKNOWN)

    assert result.is_error is True
    assert result.content.startswith(f"no blob stored under {UNKNOWN}; copy the ref exactly")


@pytest.mark.parametrize(
    "ref", ["ref://blobs/../../etc/passwd", "ref://blobs/abc", "/etc/passwd", ""]
)
async def test_malformed_ref(registry: ToolRegistry, ref: str) -> None:
    result = await read(registry, ref=ref)

    assert result.is_error is True
    assert "blob reference" in result.content
    assert f"expected {REF_PREFIX}<sha256>" in result.content


@pytest.mark.parametrize("offset", [10, 11, 1_000_000])
async def test_offset_past_the_end(
    registry: ToolRegistry, store: LocalBlobStore, offset: int
) -> None:
    ref = await store.put(b"0123456789")

    result = await read(registry, ref=ref, offset=offset)

    assert result.is_error is True
    assert result.content == (
        f"offset {offset} is past the end: {ref} has 10 bytes, so use an offset from 0 to 9"
    )


@pytest.mark.parametrize(
    ("arguments", "field", "kind", "bound"),
    [
        ({"offset": -1}, "offset", "greater_than_equal", {"ge": 0}),
        ({"length": 0}, "length", "greater_than_equal", {"ge": 1}),
        ({"length": 65_537}, "length", "less_than_equal", {"le": 65_536}),
        ({"ref": None}, "ref", "string_type", None),
    ],
)
async def test_arguments_out_of_range(
    registry: ToolRegistry,
    arguments: dict[str, Any],
    field: str,
    kind: str,
    bound: dict[str, int] | None,
) -> None:
    called = {"ref": UNKNOWN, **arguments}

    result = await read(registry, **called)

    # The bounds are ours; the sentence that states them is pydantic's.
    error = pydantic_error(ReadRefArgs, called, kind)
    assert error.get("ctx") == bound
    assert result.is_error is True
    assert result.content == f"invalid arguments for read_ref: {field}: {error['msg']}"


def test_the_model_reads_a_description_of_every_argument(store: LocalBlobStore) -> None:
    definition = read_ref_tool(store).definition()

    assert definition.name == "read_ref"
    assert "ref://blobs/" in definition.description
    properties = definition.parameters["properties"]
    assert set(properties) == {"ref", "offset", "length"}
    assert all(properties[name].get("description") for name in properties)
    assert definition.parameters["required"] == ["ref"]
