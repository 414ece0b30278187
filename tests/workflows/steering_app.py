"""A job system and scripts for steering a thread (tests/workflows/test_thread_steering.py): a
polled export that runs until the test sets `EXPORTS.done`, in `handle` and `await` modes, and a
model that starts it when asked."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from tests.one_question_job import OneQuestionJob
from tests.script_steps import call, tool_results
from waitstate import (
    App,
    ApprovalPolicy,
    Completion,
    Job,
    LongSpec,
    Message,
    Question,
    QuestionPolicy,
    Script,
    StartContext,
    ToolDefinition,
    ToolSpec,
)
from waitstate.schemas.operations import ResultMode


class NoArgs(BaseModel):
    """No arguments."""


class Exports:
    """The jobs behind `start_export` (polled): running until a test sets `done`, each
    expected to take `eta_seconds`."""

    def __init__(self, eta_seconds: int = 3600) -> None:
        self.eta_seconds = eta_seconds
        self.started = 0
        self.cancelled = 0
        self.done = False

    async def start(self, args: Any, context: StartContext) -> Job:
        self.started += 1
        return Job(job_id=f"export-{self.started}", eta_seconds=self.eta_seconds)

    async def status(self, job_id: str) -> Completion:
        if self.done:
            return Completion(status="succeeded", result={"rows": 3})
        return Completion(status="running")

    async def cancel(self, job_id: str) -> None:
        self.cancelled += 1


EXPORTS = Exports()


def _export(mode: ResultMode) -> ToolSpec:
    return ToolSpec(
        name=f"start_export_{mode}",
        description="Start an export job.",
        args=NoArgs,
        long=LongSpec(
            backend=EXPORTS,
            completion="poll",
            mode=mode,
            poll_interval=timedelta(seconds=1),
            eta=timedelta(hours=1),
        ),
    )


def exporter(mode: ResultMode | str) -> Script:
    """Starts an export when asked (its result in `mode`), says it started once the call
    returns (the handle, or where the job stands), says it is done at the operation's update,
    and answers any other message with `re: <it>`."""

    def script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
        last = messages[-1]
        if last.role == "tool":
            return Message(role="assistant", content="export started")
        if last.content.startswith("Operation update"):
            return Message(role="assistant", content="export done")
        if last.content == "export please":
            return call(len(tool_results(messages)), f"start_export_{mode}", {})
        return Message(role="assistant", content=f"re: {last.content}")

    return script


# A job that asks a person a question first (`start_export_asks`), then succeeds once answered.
ASKS = OneQuestionJob(
    "asks-1",
    Question(
        key="ok",
        message="Export everything?",
        requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
    ),
    Completion(status="succeeded", result={"rows": 3}),
)


def asking_export(backend: OneQuestionJob = ASKS) -> ToolSpec:
    """`start_export_asks`: its job (`backend`) asks a person before it runs, polled."""
    return ToolSpec(
        name="start_export_asks",
        description="Start an export job that asks before it runs.",
        args=NoArgs,
        long=LongSpec(
            backend=backend,
            completion="poll",
            poll_interval=timedelta(seconds=0.2),
            input=QuestionPolicy(answered_by="person"),
        ),
    )


class Deletions:
    """The tool behind `delete_records`, which needs a person's approval: counts its runs."""

    def __init__(self) -> None:
        self.ran = 0

    async def delete(self, args: NoArgs) -> dict[str, int]:
        self.ran += 1
        return {"deleted": 3}


DELETIONS = Deletions()


def _gated() -> ToolSpec:
    return ToolSpec(
        name="delete_records",
        description="Delete the records (a person approves it first).",
        args=NoArgs,
        handler=lambda args: DELETIONS.delete(args),
        requires_approval=True,
        approval=ApprovalPolicy(approvers="data-owners", timeout=timedelta(hours=1)),
    )


def deleter(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Deletes when asked; asked something while the call waits for its approval, says what it
    was sent (the calls pending, the message); once the deletion ran, says so, with what it was
    told meanwhile."""
    last = messages[-1]
    if last.content == "delete please":
        return call(len(tool_results(messages)), "delete_records", {})
    if last.role == "tool":
        return Message(role="assistant", content=f"deleted: {last.content}")
    if messages[-2].role == "tool" and messages[-2].content.startswith("pending"):
        results = []  # the results of the last tool calls, before the message
        for m in reversed(messages[:-1]):
            if m.role != "tool":
                break
            results.append(m)
        pending = [m.content.split(":")[0] for m in reversed(results)]
        return Message(role="assistant", content=f"re: {last.content} ({', '.join(pending)})")
    if messages[-2].role == "tool":  # the result, then what was said meanwhile
        return Message(role="assistant", content=f"deleted; told: {last.content}")
    return Message(role="assistant", content=f"re: {last.content}")


def export_then_delete(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """`exporter("handle")` and `deleter` in one: starts the export or the deletion when
    asked, and answers as each of them does."""
    last = messages[-1]
    if last.content == "export please" or (last.role == "tool" and last.name != "delete_records"):
        return exporter("handle")(messages, tools)
    if last.content.startswith("Operation update"):
        return exporter("handle")(messages, tools)
    return deleter(messages, tools)


app = App(
    tools=[_export("handle"), _export("await"), asking_export(), _gated()],
    scripts={
        "export-handle": exporter("handle"),
        "export-await": exporter("await"),
        "export-asks": exporter("asks"),
        "deleter": deleter,
        "export-delete": export_then_delete,
    },
)
