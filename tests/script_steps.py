"""Steps the test apps' scripted models share (tests/mcp/mcp_app.py, tests/workflows/*_app.py):
a tool call as the model sends it, the tool results a script has seen, and the turns of a
script that answers the question its tool's result asks, then waits for operations."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from waitstate import Message, ToolCall


def call(turn: int, name: str, arguments: dict[str, Any]) -> Message:
    """The model's message calling `name` with `arguments` (id `call_{turn}`)."""
    tool_call = ToolCall(id=f"call_{turn}", name=name, arguments=json.dumps(arguments))
    return Message(role="assistant", tool_calls=[tool_call])


def tool_results(messages: Sequence[Message]) -> list[Message]:
    """The tool results in the conversation, oldest first."""
    return [m for m in messages if m.role == "tool"]


def answer_then_wait(results: Sequence[Message], tool: str, content: Any) -> Message | None:
    """The next call of a script that answers the first question `tool`'s result asks (with
    `answer_question`, the answer's content `content`), then waits for operations; None once
    it has waited (or if `tool`'s result asked nothing)."""
    last = results[-1]
    asking = json.loads(last.content).get("questions") if last.content.startswith("{") else None
    if last.name == tool and asking:
        answer = {"question_id": asking[0]["question_id"], "content": content}
        return call(len(results), "answer_question", answer)
    if last.name == "answer_question":
        return call(len(results), "wait_for_operations", {})
    return None
