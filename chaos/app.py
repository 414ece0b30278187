"""The suite's own scripts, served beside the demo app (chaos.stack starts its workers with
both): the demo's scripts name fixed datasets, and the suite needs one per run, so that the
demo MCP server's records (`delete:NAME`) tell the runs apart."""

from __future__ import annotations

import json
from collections.abc import Sequence

from waitstate import SCRIPTED_BANNER, App, Message, ToolCall, ToolDefinition

APP = "chaos.app:app"
DELETE_SCRIPT = "chaos-delete"
DELETE_TOOL = "reports__delete_dataset"


def delete_script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Deletes the dataset the task ends with (a destructive MCP task: approved first, then
    confirmed while it runs), then answers with what became of it."""
    done = [m for m in messages if m.role == "tool"]
    if done:
        return Message(role="assistant", content=f"{SCRIPTED_BANNER} {done[-1].content}")
    task = next((m.content for m in messages if m.role == "user"), "")
    name = task.split()[-1] if task.split() else "chaos"
    arguments = json.dumps({"name": name})
    call = ToolCall(id="call_delete", name=DELETE_TOOL, arguments=arguments)
    return Message(role="assistant", tool_calls=[call])


app = App(scripts={DELETE_SCRIPT: delete_script})
