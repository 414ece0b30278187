"""Scripts for threads (tests/workflows/test_threads.py): a deterministic model that answers each
message of a conversation."""

from __future__ import annotations

from collections.abc import Sequence

from waitstate import App, Message, ToolDefinition


def echo(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers the conversation's last message: `re: <it>`, and how many messages it has
    seen from the person (so a test sees what the model was given)."""
    said = [m.content for m in messages if m.role == "user"]
    return Message(role="assistant", content=f"re: {said[-1]} ({len(said)} seen)")


app = App(scripts={"chat-echo": echo})
