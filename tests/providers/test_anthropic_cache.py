"""Anthropic's cache breakpoints, through the real SDK client against the local wire server:
where a request marks them (`cache_control`), so a conversation's prefix is read from the cache
from its second call on."""

from __future__ import annotations

from typing import Any

from tests.providers.adapters import CONVERSATION, HELLO, LOOKUP, connected
from waitstate.providers.base import Adapter, ModelRequest
from waitstate.schemas import Message, ToolDefinition
from waitstate.testing.wire_server import WireServer

EPHEMERAL = {"type": "ephemeral"}
OTHER = ToolDefinition(name="other", description="Another tool.", parameters={"type": "object"})


def _marked(body: dict[str, Any]) -> list[str]:
    """Where the request's breakpoints are: `tools[i]`, `system[i]`, `messages[i][j]`."""
    marks = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    system = body.get("system", [])
    marks += [f"system[{i}]" for i, b in enumerate(system) if "cache_control" in b]
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        if isinstance(content, list):
            marks += [f"messages[{i}][{j}]" for j, b in enumerate(content) if "cache_control" in b]
    return marks


async def _asked(wire: WireServer, request: ModelRequest) -> dict[str, Any]:
    async with connected("anthropic", wire.url) as provider:
        assert isinstance(provider, Adapter)
        await provider.answer(request)
    body: dict[str, Any] = wire.requests[-1].body
    return body


async def test_a_conversation_marks_tools_system_the_last_call_and_this_one(
    wire: WireServer,
) -> None:
    body = await _asked(wire, ModelRequest("m", "You are terse.", CONVERSATION, [LOOKUP, OTHER]))

    # messages: 0 user, 1 assistant, 2 results, 3 assistant, 4 results, 5 "Thanks."
    assert _marked(body) == ["tools[1]", "system[0]", "messages[2][1]", "messages[5][0]"]
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": EPHEMERAL}
    ]
    # A string message becomes a block to carry its breakpoint; the others stay as they were.
    assert body["messages"][5]["content"] == [
        {"type": "text", "text": "Thanks.", "cache_control": EPHEMERAL}
    ]
    assert body["messages"][0]["content"] == "Weather in Paris and Oslo?"
    assert body["messages"][2]["content"][1]["tool_use_id"] == "call_2"


async def test_the_first_call_of_a_run_with_tools_writes_its_prompt(wire: WireServer) -> None:
    body = await _asked(wire, ModelRequest("m", "", HELLO, [LOOKUP]))

    assert _marked(body) == ["tools[0]", "messages[0][0]"]
    assert "system" not in body


async def test_a_one_off_call_marks_only_its_system_prompt(wire: WireServer) -> None:
    # A checkpoint, a question asked once: no tools, no earlier turn, nothing reads it back.
    body = await _asked(wire, ModelRequest("m", "Summarise.", HELLO, []))

    assert _marked(body) == ["system[0]"]
    assert body["messages"] == [{"role": "user", "content": "hello"}]


async def test_an_empty_text_gets_no_breakpoint(wire: WireServer) -> None:
    said = [*HELLO, Message(role="assistant", content="Hi."), Message(role="user", content="")]

    body = await _asked(wire, ModelRequest("m", "", said, []))

    # The API refuses cache_control on empty text: the previous call's prefix is marked alone.
    assert _marked(body) == ["messages[0][0]"]


async def test_breakpoints_can_be_turned_off(wire: WireServer) -> None:
    async with connected("anthropic", wire.url) as provider:
        assert isinstance(provider, Adapter)
        provider._prompt_cache = False  # type: ignore[attr-defined]
        await provider.answer(ModelRequest("m", "sys", CONVERSATION, [LOOKUP]))

    assert _marked(wire.requests[-1].body) == []
