"""A deterministic model that plays a script: for tests and the offline demo, never for real work.

Each script is a pure function of the conversation so far, so a replayed or retried call gives
the same answer. Every final answer starts with SCRIPTED_BANNER, so no one mistakes its output
for a language model's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence

from providers.base import UnknownModelError
from schemas import Message, ModelResponse, ToolCall, ToolDefinition, Usage

SCRIPTED_BANNER = "[scripted model: deterministic, offline, no LLM was called]"

Script = Callable[[Sequence[Message], Sequence[ToolDefinition]], Message]

# The longest run of numbers, operators and parentheses that contains an operator.
_ARITHMETIC = re.compile(r"[-(]*\s*[\d.]+(?:[\s()]*(?:\*\*|//|[-+*/%])[\s(]*[\d.]+\)*)+")


class ScriptedProvider:
    """Plays the script named by the model spec (`scripted:<name>`)."""

    name = "scripted"

    def __init__(self, scripts: Mapping[str, Script] | None = None) -> None:
        self._scripts = dict(SCRIPTS)
        self._scripts.update(scripts or {})

    async def aclose(self) -> None:
        """Nothing to release."""

    def names(self) -> list[str]:
        """Names of the scripts it can play."""
        return sorted(self._scripts)

    async def complete(
        self,
        model: str,
        system_prompt: str,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
    ) -> ModelResponse:
        """Answer with the script's next message.

        Raises:
            UnknownModelError: no script of that name.
        """
        script = self._scripts.get(model)
        if script is None:
            raise UnknownModelError(
                f"no script named {model!r}; scripts: {', '.join(self.names())}"
            )
        reply = script(messages, tools)
        # Token counts are a deterministic stand-in (4 characters a token), so usage
        # accounting is exercised end to end without a real tokenizer.
        prompt = len(system_prompt) + sum(len(m.content) + _call_chars(m) for m in messages)
        usage = Usage(
            model_calls=1, input_tokens=prompt // 4 + 1, output_tokens=len(reply.content) // 4 + 1
        )
        stop = "tool_calls" if reply.tool_calls else "stop"
        return ModelResponse(
            message=reply, usage=usage, stop_reason=stop, model=f"scripted:{model}"
        )


def _call_chars(message: Message) -> int:
    return sum(len(c.name) + len(c.arguments) for c in message.tool_calls)


def _turn(messages: Sequence[Message]) -> int:
    """How many times the model has already answered in this conversation."""
    return sum(1 for m in messages if m.role == "assistant")


def _task(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role == "user"), "")


def _calls(turn: int, *calls: tuple[str, dict[str, str]]) -> Message:
    return Message(
        role="assistant",
        tool_calls=[
            ToolCall(id=f"call_{turn}_{i}", name=name, arguments=json.dumps(args))
            for i, (name, args) in enumerate(calls)
        ],
    )


def _answer(text: str) -> Message:
    return Message(role="assistant", content=f"{SCRIPTED_BANNER} {text}")


def _results(messages: Sequence[Message]) -> dict[str, Message]:
    """The latest result of each tool, by tool name."""
    return {m.name or "": m for m in messages if m.role == "tool"}


def demo(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """The demo: two tools at once, then a third, then an answer built from their results."""
    offered = {t.name for t in tools}
    task = _task(messages)
    turn = _turn(messages)
    if turn == 0:
        match = _ARITHMETIC.search(task)
        expression = match.group(0).strip() if match else "6 * 7"
        calls = [("calculate", {"expression": expression}), ("utc_now", {})]
        if chosen := [c for c in calls if c[0] in offered]:
            return _calls(turn, *chosen)
    counted = any(call.name == "count_words" for m in messages for call in m.tool_calls)
    if not counted and "count_words" in offered:
        return _calls(turn, ("count_words", {"text": task}))
    found = _results(messages)
    parts = [f"{name} -> {m.content}" for name, m in sorted(found.items())]
    summary = "; ".join(parts) if parts else "no tools were used"
    return _answer(f"Task: {task!r}. Results: {summary}.")


def echo(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers at once with the task."""
    return _answer(_task(messages))


def forever(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Never finishes: calls `calculate` every turn (for max_turns)."""
    turn = _turn(messages)
    return _calls(turn, ("calculate", {"expression": f"{turn} + 1"}))


def fix_args(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls `calculate` with a wrong argument name, reads the error, corrects it, answers."""
    turn = _turn(messages)
    if turn == 0:
        return _calls(turn, ("calculate", {"expr": "2 + 2"}))
    last = messages[-1]
    if turn == 1 and last.is_error:
        return _calls(turn, ("calculate", {"expression": "2 + 2"}))
    return _answer(f"2 + 2 = {last.content}")


def unknown_tool(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls a tool it was not given, then reports the error it got back."""
    turn = _turn(messages)
    if turn == 0:
        return _calls(turn, ("delete_everything", {}))
    return _answer(f"the tool call failed: {messages[-1].content}")


def fan_out(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Three `calculate` calls in one turn, then the sum of their results."""
    turn = _turn(messages)
    if turn == 0:
        return _calls(turn, *(("calculate", {"expression": f"{n} * {n}"}) for n in (2, 3, 4)))
    results = [m.content for m in messages if m.role == "tool"]
    return _answer(f"squares {', '.join(results)}")


SCRIPTS: dict[str, Script] = {
    "demo": demo,
    "echo": echo,
    "forever": forever,
    "fix-args": fix_args,
    "unknown-tool": unknown_tool,
    "fan-out": fan_out,
}
