"""Large results by reference: the model sees a preview and a `ref://blobs/...` to read on.

A tool result goes into the run's history (and into every later model call) as it is; one of
a few megabytes would make both large. Past a threshold, the full text goes to the blob store
and the history keeps a preview and the reference, which the `read_ref` tool reads in slices.
"""

from __future__ import annotations

from waitstate.blobs.store import BlobStore

DEFAULT_THRESHOLD = 16_384
DEFAULT_PREVIEW_CHARS = 1_000
TRAILER = "\n[truncated: {size} bytes in all; the full result is {ref}; read slices with read_ref]"


async def shrink(
    store: BlobStore,
    text: str,
    *,
    threshold: int = DEFAULT_THRESHOLD,
    preview_chars: int = DEFAULT_PREVIEW_CHARS,
    owner: str | None = None,
) -> str:
    """`text` itself when it is small, else a preview of it and the reference of all of it.

    Args:
        store: Where the full text is stored (as UTF-8) when it is over the threshold.
        text: A tool's result as the model would read it.
        threshold: The largest size, in UTF-8 bytes, kept as it is.
        preview_chars: How many characters of the start of `text` the preview shows.
        owner: The run (workflow id) the full text is stored for; a cleanup keeps it while
            that run may read it.

    Returns:
        `text` when its UTF-8 size is at most `threshold`; otherwise its first
        `preview_chars` characters followed by the line
        `[truncated: N bytes in all; the full result is ref://blobs/<sha256>; read slices
        with read_ref]`.

    Raises:
        ValueError: `threshold` or `preview_chars` is negative.
    """
    if threshold < 0:
        raise ValueError(f"threshold must be 0 or more, got {threshold}")
    if preview_chars < 0:
        raise ValueError(f"preview_chars must be 0 or more, got {preview_chars}")
    # surrogatepass: a lone surrogate (valid in a str, e.g. from json.loads) would make a strict
    # encode raise; this keeps the text whole, and read_ref shows such a char as U+FFFD.
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) <= threshold:
        return text
    ref = await store.put(data, owner)
    return text[:preview_chars] + TRAILER.format(size=len(data), ref=ref)
