"""The agents the AG-UI tests serve: the demo's refunds (a refund over the threshold waits for a
person's approval), played by the scripted demo model, its tools the stack's; and one whose
model holds its answer to a `slow` message until the test lets it go (tests/workflows/
threads_app.py's `held`); and one whose long tool's job asks a person a question."""

from __future__ import annotations

from collections.abc import Sequence

from tests.one_question_job import OneQuestionJob, asking_tool
from waitstate import (
    Agent,
    Completion,
    Message,
    Question,
    ToolCall,
    ToolDefinition,
    ToolSpec,
)

REFUNDER = Agent(
    "refunder",
    instructions="You refund valid claims.",
    model="scripted:demo",
    tools=["check_claim", "issue_refund"],
)

HOLDER = Agent("holder", instructions="You answer.", model="held:any")


def region_tool() -> ToolSpec:
    """A long tool whose job asks a person which region, then succeeds (polled)."""
    schema = {
        "type": "object",
        "properties": {"region": {"type": "string", "enum": ["EMEA", "APAC"]}},
        "required": ["region"],
    }
    question = Question(key="region", message="Which region?", requested_schema=schema)
    job = OneQuestionJob("region-1", question, Completion(status="succeeded", result={"ok": 1}))
    return asking_tool(job, "region_job")


def ask(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls the region job once, then answers."""
    if not any(m.role == "tool" for m in messages):
        return Message(role="assistant", tool_calls=[ToolCall(id="call_0", name="region_job")])
    return Message(role="assistant", content="done: the job has its region")


ASKER = Agent("asker", instructions="You ask.", model="scripted:asker", tools=["region_job"])
