"""Tool declarations: a ToolSpec per tool, a registry of them, and how a call is run."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from schemas import ToolCall, ToolDefinition, ToolResult

ToolKind = Literal["sync", "long", "approval"]
Handler = Callable[[Any], Awaitable[Any]]


class ToolError(Exception):
    """A failure the model should read and may correct (bad input, nothing found...)."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool, declared once: what the model sees and what runs.

    Attributes:
        name: The name the model calls it by.
        description: What the model reads to decide when to call it.
        args: Pydantic model of the arguments; its JSON schema is what the model sees.
        handler: Async function taking a validated `args` instance.
        kind: `sync` returns its result; `long` and `approval` complete later.
    """

    name: str
    description: str
    args: type[BaseModel]
    handler: Handler
    kind: ToolKind = "sync"

    def definition(self) -> ToolDefinition:
        """The tool as the model sees it."""
        return ToolDefinition(
            name=self.name, description=self.description, parameters=self.args.model_json_schema()
        )


class ToolRegistry:
    """The tools a worker can run, by name."""

    def __init__(self, specs: Iterable[ToolSpec]) -> None:
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"tool {spec.name!r} is declared twice")
            self._specs[spec.name] = spec

    def names(self) -> list[str]:
        """Names of every registered tool, sorted."""
        return sorted(self._specs)

    def get(self, name: str) -> ToolSpec | None:
        """The tool of that name, or None."""
        return self._specs.get(name)

    def unknown(self, names: Iterable[str]) -> list[str]:
        """The names among `names` that no registered tool has."""
        return [name for name in names if name not in self._specs]

    def definitions(self, names: Sequence[str]) -> list[ToolDefinition]:
        """Definitions of the named tools, in order.

        Raises:
            KeyError: a name is not registered.
        """
        if missing := self.unknown(names):
            raise KeyError(f"unknown tools: {', '.join(missing)}; known: {', '.join(self.names())}")
        return [self._specs[name].definition() for name in names]

    async def run(self, call: ToolCall) -> ToolResult:
        """Validate a call's arguments and run it.

        Wrong arguments, unknown names and `ToolError`s come back as an error result the model
        can act on; any other exception propagates, so the caller's retry policy applies.
        """
        spec = self._specs.get(call.name)
        if spec is None:
            return _error(call, f"unknown tool {call.name!r}; available: {', '.join(self.names())}")
        try:
            raw = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as err:
            return _error(call, f"arguments are not valid JSON ({err.msg}); send a JSON object")
        try:
            args = spec.args.model_validate(raw)
        except ValidationError as err:
            return _error(call, f"invalid arguments for {call.name}: {_describe(err)}")
        try:
            output = await spec.handler(args)
        except ToolError as err:
            return _error(call, str(err))
        return ToolResult(tool_call_id=call.id, name=call.name, content=_to_text(output))


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(tool_call_id=call.id, name=call.name, content=message, is_error=True)


def _describe(err: ValidationError) -> str:
    # One line per problem, naming the field, so the model knows exactly what to change.
    problems = []
    for item in err.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(arguments)"
        problems.append(f"{where}: {item['msg']}")
    return "; ".join(problems)


def _to_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, BaseModel):
        return output.model_dump_json()
    return json.dumps(output, default=str)
