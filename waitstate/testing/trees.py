"""A scripted lead's fan-out, for the tests', chaos suite's and demo's agent trees: one turn
calling its sub-agents' tools, round robin."""

from __future__ import annotations

import json
from collections.abc import Sequence

from waitstate.schemas import Message, ToolCall


def fan_out(task: str, agents: Sequence[str], fan: int) -> Message:
    """The model's message calling the tools `agents` (round robin) `fan` times in one turn,
    each with `task` and the part's number (`<task> > part <n>`)."""
    calls = [
        ToolCall(
            id=f"call_0_{i}",
            name=agents[i % len(agents)],
            arguments=json.dumps({"task": f"{task} > part {i + 1}"}),
        )
        for i in range(fan)
    ]
    return Message(role="assistant", tool_calls=calls)
