"""The bench's own tool, shared by both sides: `chunk` answers 4 KB of text (figure 5)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from waitstate.tools import ToolSpec

CHUNK_BYTES = 4096


class ChunkArgs(BaseModel):
    n: int = Field(description="Which chunk to read.")


async def chunk(args: ChunkArgs) -> str:
    """4 KB of text, numbered: the tool output of the history-growth figure."""
    head = f"chunk {args.n:04d} "
    return head + "y" * (CHUNK_BYTES - len(head))


def chunk_tool() -> ToolSpec:
    """`chunk`: a sync tool answering 4 KB."""
    return ToolSpec(name="chunk", description="Read one 4 KB chunk.", args=ChunkArgs, handler=chunk)
