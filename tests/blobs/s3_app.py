"""An app for the shared-bucket tests (loaded by reference: `tests.blobs.s3_app:app`): a tool
whose result is large enough to be kept by reference, a tool that waits for a person (so the
test can change workers while the run waits), and the script that uses them."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from waitstate import Agent, App, Message, ToolCall, ToolDefinition, tool

# 50 KB: over the 16 KB past which a result reaches the model as a preview and a reference.
REPORT = "".join(f"row {i:05d}: {'x' * 40}\n" for i in range(1000))
READ_AT, READ_LENGTH = 30_000, 60
_REF = re.compile(r"ref://blobs/[0-9a-f]{64}")


@tool
async def build_report() -> str:
    """Build the quarterly report (large)."""
    return REPORT


@tool(requires_approval=True)
async def file_report(ref: str, part: int) -> dict[str, object]:
    """File a part of the report, once a person approves.

    Args:
        ref: The report's reference.
        part: Which part (1 or 2).
    """
    return {"filed": ref, "part": part}


def build_file_read(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Builds the report; files part 1 (a person approves); reads a slice of the report by its
    reference; files part 2 (approved again); answers with the slice it read."""
    results = [m.content for m in messages if m.role == "tool"]
    match = _REF.search(results[0]) if results else None
    ref = match.group(0) if match else ""
    calls = [
        ("build_report", {}),
        ("file_report", {"ref": ref, "part": 1}),
        ("read_ref", {"ref": ref, "offset": READ_AT, "length": READ_LENGTH}),
        ("file_report", {"ref": ref, "part": 2}),
    ]
    if len(results) < len(calls):
        name, arguments = calls[len(results)]
        call = ToolCall(id=f"call_{len(results)}", name=name, arguments=json.dumps(arguments))
        return Message(role="assistant", tool_calls=[call])
    return Message(role="assistant", content=f"read: {json.loads(results[2])['text']}")


app = App(
    agents=[
        Agent(
            "reporter",
            model="scripted:build-file-read",
            tools=[build_report, file_report],
            max_turns=6,
        )
    ],
    scripts={"build-file-read": build_file_read},
)
