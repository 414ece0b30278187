"""The suite's own scripts and tools, served beside the demo app (chaos.stack starts its workers
with both): the demo's scripts name fixed datasets, and the suite needs one per run, so that the
demo systems' and MCP server's records (`delete:NAME`, a purge's dataset) tell the runs apart;
and issue 22's rows need the demo's long tools declared otherwise (a purge whose question the
model answers, an export whose status is checked every few seconds in case its webhook was
lost). The tree rows' agents and their lead's script are chaos.tree_app's."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from chaos import tree_app
from examples.demo.app import DemoDeps
from examples.demo.app import app as demo_app
from examples.demo.exports import ExportService, export_tool
from examples.demo.purges import PurgeService, purge_tool
from waitstate import (
    SCRIPTED_BANNER,
    Agent,
    App,
    InputPolicy,
    Message,
    ToolCall,
    ToolDefinition,
    ToolSpec,
)
from waitstate.providers.scripted import questions_for_the_model

APP = "chaos.app:app"
DELETE_SCRIPT = "chaos-delete"
DELETE_TOOL = "reports__delete_dataset"
# The demo's purge (a person confirms it); and the suite's, whose question goes to the model.
PURGE_TOOL = "purge_dataset"
PURGE_SCRIPT = "chaos-purge"
MODEL_PURGE_TOOL = "purge_for_the_model"
WAIT_AND_ANSWER_SCRIPT = "chaos-purge-wait-answer"
# The demo's export, its status checked every few seconds (not every five minutes).
RECONCILED_EXPORT_TOOL = "export_reconciled"
RECONCILED_EXPORT_SCRIPT = "chaos-export-reconciled"
RECONCILE_EVERY = timedelta(seconds=3)
# Long beside a check's few seconds: a run that learns its job's end only at the expiry (its
# webhook lost, no check) is told the job expired, and the job is sent a cancel.
RECONCILED_EXPORT_TIMEOUT = timedelta(seconds=60)
# How long the model has to answer its purge's question (then the purge is told no): far longer
# than a turn, short enough that a question the model never sees ends its run within the suite.
MODEL_QUESTION_TIMEOUT = timedelta(seconds=60)
# The agent class 18 (chaos.mcp_doors) calls over MCP: the demo's export, its model named (an
# agent that names none gets the workers' default, here the wire stand-in's).
EXPORTER = Agent(
    "chaos-exporter",
    model="scripted:demo",
    tools=["start_export", "verify_row_count", "upload_file", "notify_team"],
)


def _call(turn: int, name: str, arguments: dict[str, Any]) -> Message:
    call = ToolCall(id=f"call_{turn}", name=name, arguments=json.dumps(arguments))
    return Message(role="assistant", tool_calls=[call])


def _named(messages: Sequence[Message]) -> str:
    """The name the run's task ends with (a dataset named by the run's id)."""
    task = next((m.content for m in messages if m.role == "user"), "")
    return task.split()[-1] if task.split() else "chaos"


def delete_script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Deletes the dataset the task ends with (a destructive MCP task: approved first, then
    confirmed while it runs), then answers with what became of it."""
    done = [m for m in messages if m.role == "tool"]
    if done:
        return Message(role="assistant", content=f"{SCRIPTED_BANNER} {done[-1].content}")
    return _call(0, DELETE_TOOL, {"name": _named(messages)})


def purge_script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Purges the dataset the task ends with (the purge asks a person to confirm mid-flight),
    then answers with what became of it."""
    done = [m for m in messages if m.role == "tool"]
    if done:
        return Message(role="assistant", content=f"{SCRIPTED_BANNER} {done[-1].content}")
    return _call(0, PURGE_TOOL, {"dataset": _named(messages)})


def reconciled_export_script(
    messages: Sequence[Message], tools: Sequence[ToolDefinition]
) -> Message:
    """Exports Q3's transactions (`export_reconciled`), then answers with the result."""
    done = [m for m in messages if m.role == "tool"]
    if done:
        return Message(role="assistant", content=f"{SCRIPTED_BANNER} {done[-1].content}")
    arguments = {"dataset": "transactions", "period": "2025-Q3"}
    return _call(0, RECONCILED_EXPORT_TOOL, arguments)


def wait_and_answer_script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Starts the purge of the dataset the task ends with (a handle comes back), waits for
    operations, confirms the purge when the wait brings its question, waits again; then
    answers with every result it saw, one per line (`tool: content`)."""
    results = [m for m in messages if m.role == "tool"]
    if not results:
        return _call(0, MODEL_PURGE_TOOL, {"dataset": _named(messages)})
    last = results[-1]
    if last.name in (MODEL_PURGE_TOOL, "answer_question"):
        return _call(len(results), "wait_for_operations", {})
    if last.name == "wait_for_operations" and (asking := questions_for_the_model(last.content)):
        answer = {"question_id": asking[0]["question_id"], "content": {"confirm": True}}
        return _call(len(results), "answer_question", answer)
    lines = [f"{m.name}: {m.content}" for m in results]
    return Message(role="assistant", content="\n".join(lines))


def _tools(deps: DemoDeps) -> list[ToolSpec]:
    for_the_model = InputPolicy(
        answered_by="model", timeout=MODEL_QUESTION_TIMEOUT, on_timeout="decline"
    )
    purge = purge_tool(
        PurgeService(deps.http, deps.systems_url), input=for_the_model, mode="handle"
    )
    export = export_tool(
        ExportService(deps.http, deps.systems_url),
        timeout=RECONCILED_EXPORT_TIMEOUT,
        reconcile_every=RECONCILE_EVERY,
    )
    return [
        dataclasses.replace(purge, name=MODEL_PURGE_TOOL),
        dataclasses.replace(export, name=RECONCILED_EXPORT_TOOL),
    ]


app = App(
    agents=[EXPORTER, *tree_app.AGENTS],
    scripts={
        **tree_app.SCRIPTS,
        DELETE_SCRIPT: delete_script,
        PURGE_SCRIPT: purge_script,
        WAIT_AND_ANSWER_SCRIPT: wait_and_answer_script,
        RECONCILED_EXPORT_SCRIPT: reconciled_export_script,
    },
    tools=_tools,
    # The demo's own: a connection pool, and the demo systems its tools call (the same ones).
    deps=demo_app.deps,
)
