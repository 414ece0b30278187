"""The data converter: activity inputs and results are recorded without their defaults and
decode to the same values; a run's input is recorded whole, but for what a starting run's agent
will set."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from waitstate.converter import DATA_CONVERTER
from waitstate.schemas import DEFAULT_SYSTEM_PROMPT, Message, ModelCallInput, RunInput, ToolCall
from waitstate.schemas.run import REVISION, RunCarry, RunState
from waitstate.schemas.threads import ThreadSettings


def _recorded(value: Any) -> dict[str, Any]:
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([value])
    return dict(json.loads(payload.data))


def _round_trip(value: Any) -> Any:
    payloads = DATA_CONVERTER.payload_converter.to_payloads([value])
    [decoded] = DATA_CONVERTER.payload_converter.from_payloads(payloads, [type(value)])
    return decoded


def test_activity_input_leaves_out_defaults_and_decodes_to_the_same_value() -> None:
    call = ModelCallInput(
        model="openai:gpt-4.1",
        system_prompt=DEFAULT_SYSTEM_PROMPT,
        new_messages=[Message(role="user", content="What is 17 * 23?")],
        tools=["calculate"],
    )

    assert _recorded(call) == {
        "model": "openai:gpt-4.1",
        "new_messages": [{"role": "user", "content": "What is 17 * 23?"}],
        "tools": ["calculate"],
    }
    assert _round_trip(call) == call


def test_a_value_changed_after_construction_is_recorded() -> None:
    # Fields mutated in place are not "set" in pydantic's sense; they differ from the default.
    message = Message(role="assistant")
    message.tool_calls.append(ToolCall(id="call_1", name="calculate", arguments='{"x": 1}'))

    assert _recorded(message)["tool_calls"] == [
        {"id": "call_1", "name": "calculate", "arguments": '{"x": 1}'}
    ]
    assert _round_trip(message) == message


def test_a_run_input_is_recorded_whole() -> None:
    run = RunInput(task="Export Q3", tool_timeout=timedelta(minutes=5))

    recorded = _recorded(run)

    assert recorded["system_prompt"] == DEFAULT_SYSTEM_PROMPT
    assert recorded["max_turns"] == RunInput.model_fields["max_turns"].default
    assert recorded["approval"]["on_timeout"] == run.approval.on_timeout
    assert _round_trip(run) == run


def test_a_run_input_records_its_revision_and_one_recorded_without_reads_as_0() -> None:
    started = RunInput(task="t")
    recorded = _recorded(started)
    before_revisions = {k: v for k, v in recorded.items() if k != "revision"}
    [payload] = DATA_CONVERTER.payload_converter.to_payloads([started])
    payload.data = json.dumps(before_revisions).encode()
    [old] = DATA_CONVERTER.payload_converter.from_payloads([payload], [RunInput])

    assert recorded["revision"] == REVISION
    assert _round_trip(started).recorded_revision() == REVISION
    assert _round_trip(RunInput(task="t", revision=0)).recorded_revision() == 0
    # An input recorded before revisions replays as 0; the input it continues as new with
    # (a copy, as `Continuation` makes it) is recorded with the newest.
    assert old.recorded_revision() == 0
    assert _round_trip(old.model_copy(update={"task": "next"})).recorded_revision() == REVISION


def test_a_starting_run_of_an_agent_leaves_out_what_its_agent_will_set() -> None:
    starting = RunInput(task="Export Q3", agent="exporter", max_turns=3)
    # Set after it was made (as the CLI makes a thread of an agent): kept, not at its default.
    thread = starting.model_copy(update={"thread": ThreadSettings()})

    recorded = _recorded(starting)

    # What the opening replaces from the agent's recorded definition is left out...
    for left in ("system_prompt", "tools", "approval", "constraints", "model"):
        assert left not in recorded, left
    # ...but what its starter set, and the run's own policy, are kept.
    assert recorded["max_turns"] == 3
    assert recorded["tool_timeout"] == "PT2M"
    assert recorded["agent_overrides"] == ["max_turns"]
    assert _round_trip(starting) == starting
    assert _recorded(thread)["thread"] == ThreadSettings().model_dump(mode="json")
    assert _round_trip(thread).thread == ThreadSettings()


def test_a_continued_run_of_an_agent_is_recorded_whole() -> None:
    resolved = RunInput(task="t", agent="exporter", system_prompt="Be brief.")
    carry = RunCarry(state=RunState(task="t"), unsent=[])
    continued = RunInput(task="t", agent="exporter", carry=carry)

    assert _recorded(resolved)["system_prompt"] == "Be brief."
    assert _recorded(continued)["system_prompt"] == DEFAULT_SYSTEM_PROMPT
