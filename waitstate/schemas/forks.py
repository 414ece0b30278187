"""A fork: a new run that goes on from turn N of a recorded run, with another model, prompt or
agent, its tool calls answered from the recording (docs/forks.md).

The recording is read from the recorded run's history (across its continue-as-new chain): what
the model was sent up to turn N (the prefix, by reference as the recorded run kept it), and
every tool call the recorded run's model made with the result it read. The client that starts
a fork reads it (to refuse a fork that cannot be made) and hands it in the fork's input; a fork
started without it (an evaluation's, a sub-agent's) reads it at its opening (`read_recording`),
so it is in the fork's own history once, not in its parent's. A sub-agent's call names the child
it started, so a fork of a tree re-runs each child as a fork of the recorded child.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from waitstate.schemas.calls import ToolResult
from waitstate.schemas.messages import Message, ToolCall
from waitstate.schemas.tree import sub_agent_tool

# What a recorded call keeps of the result its model read.
ANSWERED = ("content", "content_ref", "is_error")
# How a fork answers its model's tool calls (every policy serves a recorded result first):
# `recorded` refuses any other call as unavailable; `stub` has the app's stub answer it (a tool
# with none is unavailable); `live` calls it for real, each call behind a person's approval.
ForkPolicy = Literal["recorded", "stub", "live"]
FORK_POLICIES: tuple[ForkPolicy, ...] = ("recorded", "stub", "live")
# A recording bigger than this (its JSON) is refused: it is recorded in the fork's history.
RECORDING_MAX_BYTES = 1_000_000
READ_RECORDING = "read_recording"


def call_key(name: str, arguments: str) -> str:
    """What makes two tool calls the same call: the tool, and its arguments as JSON with sorted
    keys (the model's spacing and key order aside); arguments that are not JSON, as written."""
    try:
        canonical = json.dumps(json.loads(arguments or "{}"), sort_keys=True, separators=(",", ":"))
    except ValueError:
        canonical = arguments
    return f"{name} {canonical}"


class RecordedCall(BaseModel):
    """A tool call of the recorded run's model, with the result its model read."""

    turn: int = Field(description="The model turn that made the call (1 is the first).")
    name: str
    arguments: str
    content: str
    content_ref: str | None = None
    is_error: bool = False
    child: str | None = Field(
        default=None, description="A sub-agent's call: the id of the run it started."
    )

    @property
    def key(self) -> str:
        return call_key(self.name, self.arguments)

    def result(self, call: ToolCall) -> ToolResult:
        """The result, as the recorded model read it, of the fork's `call` like it."""
        read = self.model_dump(include=set(ANSWERED))
        return ToolResult(tool_call_id=call.id, name=call.name, **read)


class Recording(BaseModel):
    """What a fork takes from the run it forks: the prefix and the recorded calls."""

    origin: str = Field(description="The recorded run's id.")
    turns: int = Field(description="The model turns the recorded run took.")
    at: int = Field(ge=0, description="The turns kept: the fork's first model call is at + 1.")
    transcript_ref: str | None = Field(
        default=None, description="The conversation the recorded turn at + 1 was sent first."
    )
    messages: list[Message] = Field(description="And what it was sent with it: the prefix's end.")
    calls: list[RecordedCall] = Field(default_factory=list, description="Every call, in order.")
    thread_messages: list[str] = Field(
        default_factory=list,
        description="A thread's fork: the recorded thread's first `at` messages, which the "
        "fork answers again, in order (a thread's `at` counts its messages, not turns).",
    )
    answer: str | None = Field(default=None, description="The recorded run's final answer.")
    status: str = Field(default="", description="How the recorded run ended.")

    def find(self, name: str, arguments: str, seen: int = 0) -> RecordedCall | None:
        """The recorded call like this one (the `seen`+1-th of them; past the last, the last),
        or None."""
        key = call_key(name, arguments)
        like = [c for c in self.calls if c.key == key]
        return like[min(seen, len(like) - 1)] if like else None

    def calls_after(self) -> list[RecordedCall]:
        """The calls of the turns the fork takes again."""
        return [c for c in self.calls if c.turn > self.at]


class ForkOf(BaseModel):
    """Set in a fork's input: the run it forks, the turn, the policy, and the recording."""

    origin: str
    at: int = Field(ge=0)
    policy: ForkPolicy = "recorded"
    model: str | None = Field(
        default=None, description="The model the fork was given: its sub-agents' forks get it."
    )
    recording: Recording | None = Field(
        default=None, description="None: the fork reads it at its opening (`read_recording`)."
    )

    def child(self, agent: str, task: str) -> ForkOf | None:
        """The fork of the sub-agent the recorded run started for `agent` on `task`; under
        `live`, one the recorded run did not start is a fork with nothing recorded (each of its
        calls is asked of a person); None otherwise."""
        assert self.recording is not None  # read at the fork's opening
        recorded = self.recording.find(sub_agent_tool(agent), json.dumps({"task": task}))
        if recorded is not None and recorded.child is not None:
            origin, recording = recorded.child, None
        elif self.policy == "live":
            first = Message(role="user", content=task)
            origin, recording = (
                self.origin,
                Recording(origin=self.origin, turns=0, at=0, messages=[first]),
            )
        else:
            return None
        return ForkOf(
            origin=origin, at=0, policy=self.policy, model=self.model, recording=recording
        )


class ForkState(BaseModel):
    """A fork's record of how its tool calls were answered (`RunState.fork`)."""

    origin: str
    at: int
    policy: ForkPolicy
    stubbed: int = Field(default=0, description="Calls the app's stubs answered.")
    live: int = Field(default=0, description="Calls made for real, each approved.")
    unavailable: list[str] = Field(
        default_factory=list, description="Calls refused to the model as unavailable."
    )
    seen: dict[str, int] = Field(
        default_factory=dict,
        description="Per call (tool and arguments): times answered from the recording.",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def recorded(self) -> int:
        """Calls answered from the recording."""
        return sum(self.seen.values())


class ForkRequest(BaseModel):
    """A fork asked for: of which run, from which turn, with what (None: as recorded), and how
    its tool calls are answered (`WaitstateClient.fork_input`, the `prepare_fork` activity)."""

    run_id: str
    at: int = Field(default=0, ge=0)
    model: str | None = None
    instructions: str | None = None
    agent: str | None = None
    policy: ForkPolicy = "recorded"


class RecordingRequest(BaseModel):
    """Input of the `read_recording` activity: the run a fork forks, and the turn."""

    origin: str
    at: int = Field(ge=0)
