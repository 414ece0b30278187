"""The steps the scripted model's scripts share (scripted.py, scripted_research.py): a turn of
tool calls, a final answer, and the results a script has seen so far."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from waitstate.schemas import Message, ToolCall

SCRIPTED_BANNER = "[scripted model: deterministic, offline, no LLM was called]"

# A claim's id in a task, e.g. "C-118".
CLAIM = re.compile(r"\b(C-\d+)\b", re.IGNORECASE)


def call_tools(turn: int, *calls: tuple[str, dict[str, Any]]) -> Message:
    """The model's message making `calls` at once (ids `call_{turn}_{i}`)."""
    return Message(
        role="assistant",
        tool_calls=[
            ToolCall(id=f"call_{turn}_{i}", name=name, arguments=json.dumps(args))
            for i, (name, args) in enumerate(calls)
        ],
    )


def final_answer(text: str) -> Message:
    """A final answer, after SCRIPTED_BANNER."""
    return Message(role="assistant", content=f"{SCRIPTED_BANNER} {text}")


def latest_results(messages: Sequence[Message]) -> dict[str, Message]:
    """The latest result of each tool, by tool name."""
    return {m.name or "": m for m in messages if m.role == "tool"}


def tool_outcome(messages: Sequence[Message], tool: str) -> dict[str, Any] | None:
    """The latest result of `tool` as JSON, if it was called and answered with JSON: from a
    tool message, or from the Completed/Event lines of a context rebuilt after a long wait."""
    found = latest_results(messages).get(tool)
    text = found.content if found is not None else from_rebuilt(messages, tool)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"error": text}
    return value if isinstance(value, dict) else {"value": value}


def from_rebuilt(messages: Sequence[Message], tool: str) -> str | None:
    """The latest result of `tool` in the Completed/Event lines of a rebuilt context."""
    found = None
    for message in messages:
        if message.role != "user" or not message.content.startswith("Task: "):
            continue
        for line in message.content.splitlines():
            for part in line.split("; "):
                head, sep, rest = part.partition(f"{tool}: ")
                if sep and head.strip() in ("-", "Event:", ""):
                    found = rest
    return found
