"""The agents `python -m waitstate.mcp_server` serves in the tests (`tests/mcp/test_agent_server.py`),
and a run of another agent that calls one of them over MCP: served as `fleet`."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from tests.mcp.mcp_app import one_call
from tests.workflows.tree_app import lead
from waitstate import Agent, App, Message, ToolDefinition
from waitstate.schemas.approvals import ApprovalPolicy

APP = "tests.mcp.agents_app:app"
ASKS = "Delete the q3 drafts"


class Echoed(BaseModel):
    """What the `echo-json` agent answers: its task, which must be this object as JSON."""

    word: str
    count: int


def verbatim(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers with its task, word for word (no banner: an answer an output type can read)."""
    return Message(role="assistant", content=next(m.content for m in messages if m.role == "user"))


def listener(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers with how many of the conversation's messages it has heard, and the latest."""
    heard = [m.content for m in messages if m.role == "user"]
    return Message(role="assistant", content=f"heard {len(heard)}: {heard[-1]}")


app = App(
    agents=[
        Agent(
            "approver",
            description="Asks a person before it acts, then says what they decided.",
            model="scripted:ask-first",
            tools=["request_approval"],
            approval=ApprovalPolicy(approvers="fleet-leads"),
        ),
        Agent(
            "approver-lead",
            description="Has an approver (a sub-agent) ask a person, then says what it heard.",
            model="scripted:mcp-tree-lead",
            sub_agents=["approver"],
        ),
        Agent("echo", model="scripted:echo"),
        Agent("listener", model="scripted:listener"),
        Agent("echo-json", model="scripted:verbatim", output_type=Echoed, max_turns=1),
    ],
    scripts={
        "mcp-tree-lead": lead,
        "call-approver": one_call("fleet__approver", {"task": ASKS}),
        "verbatim": verbatim,
        "listener": listener,
    },
)
