"""An app for the agent tests, declared only through the public API (loaded by reference:
`tests.workflows.agent_app:app`), with scripts for the deterministic model."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from waitstate import Agent, App, Message, RunContext, ToolCall, ToolDefinition, tool

FIX_OUTPUT = "does not match the required output"


@dataclass(frozen=True)
class Deps:
    greeting: str


@tool
async def word_count(ctx: RunContext[Deps], text: str) -> dict[str, object]:
    """Count the words of a text.

    Args:
        text: The text to count.
    """
    return {
        "words": len(text.split()),
        "greeting": ctx.deps.greeting,
        "run_id": ctx.run_id,
        "idempotency_key": ctx.idempotency_key,
    }


class Report(BaseModel):
    title: str
    words: int


def count_then_answer(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Counts the task's words with word_count, then answers with its result."""
    results = [m for m in messages if m.role == "tool"]
    if not results:
        task = next(m.content for m in messages if m.role == "user")
        call = ToolCall(id="call_0", name="word_count", arguments=json.dumps({"text": task}))
        return Message(role="assistant", tool_calls=[call])
    return Message(role="assistant", content=f"counted: {results[-1].content}")


def bad_then_good(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers with JSON that misses a field; told so, answers again in a fenced block."""
    told = [m for m in messages if m.role == "user" and FIX_OUTPUT in m.content]
    if not told:
        return Message(role="assistant", content='{"title": "Q3"}')
    return Message(role="assistant", content='```json\n{"title": "Q3", "words": 3}\n```')


def never_good(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Never answers as the output type asks."""
    return Message(role="assistant", content="a report, in prose")


app = App(
    agents=[
        Agent(
            "counter",
            instructions="Count words.",
            model="scripted:count-then-answer",
            tools=[word_count],
            max_turns=4,
        ),
        Agent("reporter", model="scripted:bad-then-good", output_type=Report, max_turns=3),
        Agent("stubborn", model="scripted:never-good", output_type=Report, max_turns=2),
        Agent("tempered", model="openai:test-model", temperature=0.3, max_tokens=200),
    ],
    deps=lambda: Deps(greeting="hello from the app"),
    scripts={
        "count-then-answer": count_then_answer,
        "bad-then-good": bad_then_good,
        "never-good": never_good,
    },
)
