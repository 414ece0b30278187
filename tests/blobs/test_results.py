"""shrink: small results pass through, large ones become a preview and a blob reference."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from waitstate.blobs import LocalBlobStore, ref_for, shrink


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


def stored(store: LocalBlobStore) -> list[Path]:
    return [path for path in store.root.rglob("*") if path.is_file()]


@pytest.mark.parametrize("text", ["", "short", "x" * 16_384])
async def test_at_or_under_the_threshold_text_is_unchanged(
    store: LocalBlobStore, text: str
) -> None:
    assert await shrink(store, text) == text
    assert stored(store) == []


async def test_one_byte_over_the_threshold_is_shrunk(store: LocalBlobStore) -> None:
    text = "x" * 16_385

    result = await shrink(store, text)

    assert result.startswith("x" * 1_000 + "\n[truncated: 16385 bytes in all; ")
    assert len(stored(store)) == 1


async def test_the_threshold_counts_utf8_bytes_not_characters(store: LocalBlobStore) -> None:
    text = "é" * 10  # 10 characters, 20 bytes

    assert await shrink(store, text, threshold=20) == text
    assert (await shrink(store, text, threshold=19)).startswith("é" * 10 + "\n[truncated: 20 bytes")


async def test_the_exact_trailer_line(store: LocalBlobStore) -> None:
    text = "abcdefgh" * (5 * 1024 * 1024 // 8)
    digest = hashlib.sha256(text.encode()).hexdigest()

    result = await shrink(store, text)

    assert result == text[:1_000] + (
        f"\n[truncated: 5242880 bytes in all; the full result is ref://blobs/{digest}; "
        "read slices with read_ref]"
    )


@pytest.mark.parametrize("preview_chars", [0, 1, 250, 1_000])
async def test_preview_length(store: LocalBlobStore, preview_chars: int) -> None:
    text = "".join(chr(0x41 + i % 26) for i in range(20_000))

    result = await shrink(store, text, preview_chars=preview_chars)

    preview, trailer = result.split("\n[truncated: ")
    assert preview == text[:preview_chars]
    assert trailer.endswith("; read slices with read_ref]")


async def test_the_stored_blob_equals_the_text(store: LocalBlobStore) -> None:
    text = "line ✓ " * 5_000
    data = text.encode()

    await shrink(store, text)

    ref = ref_for(hashlib.sha256(data).hexdigest())
    assert await store.get(ref) == data
    assert (await store.get(ref)).decode() == text


async def test_shrinking_is_idempotent(store: LocalBlobStore) -> None:
    text = "y" * 50_000

    assert await shrink(store, text) == await shrink(store, text)
    assert len(stored(store)) == 1


@pytest.mark.parametrize(("threshold", "preview_chars"), [(-1, 10), (10, -1)])
async def test_negative_sizes_are_refused(
    store: LocalBlobStore, threshold: int, preview_chars: int
) -> None:
    with pytest.raises(ValueError, match="must be 0 or more"):
        await shrink(store, "text", threshold=threshold, preview_chars=preview_chars)
