"""The `read_ref` tool: read a slice of a large result kept in the blob store by reference."""

from __future__ import annotations

from typing import Any

from waitstate.blobs import REF_PREFIX, BlobNotFound, BlobStore, BlobStoreUnavailable
from waitstate.schemas.builtin import READ_REF, ReadRefArgs
from waitstate.tools.spec import ToolError, ToolSpec


def read_ref_tool(store: BlobStore) -> ToolSpec:
    """The `read_ref` tool over `store`: the store the run's large results were written to."""

    async def read_ref(args: ReadRefArgs) -> dict[str, Any]:
        try:
            total = await store.size(args.ref)
            # An empty blob has one slice, the empty one at 0; otherwise a start at or past
            # the end is an error, so the model learns the size instead of reading nothing.
            if args.offset > 0 and args.offset >= total:
                raise ToolError(
                    f"offset {args.offset} is past the end: {args.ref} has {total} bytes, "
                    f"so use an offset from 0 to {max(total - 1, 0)}"
                )
            data = await store.get(args.ref, args.offset, args.length)
        except ValueError as err:
            raise ToolError(f"{err}; copy the ref exactly as the truncated result gave it") from err
        except BlobNotFound as err:
            # Not str(err): where the store is and how operators share it are for the logs.
            raise ToolError(
                f"no blob stored under {args.ref}; copy the ref exactly as the truncated result "
                "gave it, from this run"
            ) from err
        except BlobStoreUnavailable as err:
            # An outage: the model may go on with other work and read it later.
            raise ToolError(
                f"{args.ref} cannot be read just now (the blob store is unavailable); it is "
                "not lost: try again later"
            ) from err
        return {
            "ref": args.ref,
            "offset": args.offset,
            "length": len(data),
            "total_bytes": total,
            # A slice may cut a multi-byte character at either edge; it shows as U+FFFD.
            "text": data.decode("utf-8", errors="replace"),
        }

    return ToolSpec(
        name=READ_REF,
        description=(
            "Read part of a large result that was cut to a preview and stored, "
            f"named by a '{REF_PREFIX}...' reference in a line '[truncated: ...]'. "
            "Returns {ref, offset, length, total_bytes, text}: `length` bytes of the result "
            "from `offset`, as text. Read on from offset + length until total_bytes."
        ),
        args=ReadRefArgs,
        handler=read_ref,
    )
