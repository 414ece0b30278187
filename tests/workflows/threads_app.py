"""Models for threads (tests/workflows/test_threads.py): a deterministic one that answers each
message of a conversation, and one that holds its answer to a `slow` message until the test
lets it go (a model call in flight): by `RELEASE` in the test's own process, or, in a worker
process of its own, once the file `THREADS_RELEASE_FILE` names exists."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import timedelta

from waitstate import (
    Agent,
    App,
    Message,
    ToolDefinition,
)
from waitstate.providers.base import Adapter, ModelRequest
from waitstate.schemas import ModelResponse, Usage
from waitstate.schemas.threads import ThreadSettings

# Set by a test to let a held call answer (the worker runs in the test's process).
RELEASE = asyncio.Event()
HOLD_LIMIT = 60.0


def echo(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers the conversation's last message: `re: <it>`, and how many messages it has
    seen from the person (so a test sees what the model was given)."""
    said = [m.content for m in messages if m.role == "user"]
    return Message(role="assistant", content=f"re: {said[-1]} ({len(said)} seen)")


class Held(Adapter):
    """`echo`, once `RELEASE` is set when the last message asks for it to be `slow`."""

    name = "held"

    async def answer(self, request: ModelRequest) -> ModelResponse:
        said = [m.content for m in request.messages if m.role == "user"]
        if "slow" in said[-1]:
            await asyncio.wait_for(_released(), HOLD_LIMIT)
        reply = echo(request.messages, request.tools)
        return ModelResponse(message=reply, usage=Usage(input_tokens=1, output_tokens=1))

    async def aclose(self) -> None:
        return None


async def _released() -> None:
    path = os.environ.get("THREADS_RELEASE_FILE")
    if path is None:
        await RELEASE.wait()
        return
    while not os.path.exists(path):  # noqa: ASYNC110, ASYNC240 (another process: a file)
        await asyncio.sleep(0.05)


# An agent whose threads refuse a message while it works, and close after a week idle.
HELPDESK = Agent(
    "helpdesk",
    model="scripted:chat-echo",
    thread=ThreadSettings(busy="reject", close_after=timedelta(days=7)),
)


app = App(agents=[HELPDESK], scripts={"chat-echo": echo}, providers={"held": Held})
