"""Tools from typed Python functions: `@tool`, and the `RunContext` a handler may ask for.

    @tool
    async def lookup_customer(ctx: RunContext[Deps], customer_id: str) -> dict[str, str]:
        '''Look a customer up by id.

        Args:
            customer_id: The id, like "C-118".
        '''
        return await ctx.deps.crm.get(customer_id, idempotency_key=ctx.idempotency_key)

The arguments the model sends are validated against a pydantic model built from the signature
(its JSON schema is what the model sees); the description is the docstring's text before its
sections (or `description=`), and each argument's description comes from its `Args:` entry. A
tool with no description is refused: the model would see only its name.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, get_origin, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, create_model

from waitstate.schemas.approvals import ApprovalPolicy
from waitstate.tools.spec import ToolSpec

DepsT = TypeVar("DepsT")


@dataclass(frozen=True)
class RunContext(Generic[DepsT]):
    """What a tool call knows about where it runs.

    Attributes:
        run_id: The run's workflow id.
        tool_call_id: The model's id for this call.
        idempotency_key: The same for every attempt of this call, and for no other call: send
            it to the system the tool changes, so a retried attempt does not act twice.
        deps: What the tool's app provides (`App(deps=...)`): an HTTP client, a database
            pool... None when the app provides nothing.
    """

    run_id: str
    tool_call_id: str
    idempotency_key: str
    deps: DepsT


_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$"
)
_ARG = re.compile(r"^\s{2,}(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def _docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The description (text before the first section) and each argument's description."""
    lines = inspect.cleandoc(fn.__doc__ or "").splitlines()
    description: list[str] = []
    args: dict[str, str] = {}
    section = None
    current = None
    indent = None  # of the argument lines; deeper lines continue the argument above
    for line in lines:
        if match := _SECTION.match(line):
            section, current, indent = match[1], None, None
            continue
        if section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            depth = len(line) - len(line.lstrip())
            match = _ARG.match(line)
            if match and (indent is None or depth <= indent):
                indent, current = depth, match[1]
                args[current] = match[2].strip()
            elif current is not None:
                args[current] = f"{args[current]} {line.strip()}".strip()
    return " ".join(" ".join(description).split()), args


def _is_context(annotation: Any) -> bool:
    return annotation is RunContext or get_origin(annotation) is RunContext


@overload
def tool(fn: Callable[..., Awaitable[Any]], /) -> ToolSpec: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | Callable[[Any], bool] = False,
    approval: ApprovalPolicy | None = None,
    stub: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[..., Awaitable[Any]]], ToolSpec]: ...


def tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | Callable[[Any], bool] = False,
    approval: ApprovalPolicy | None = None,
    stub: Callable[[Any], Any] | None = None,
) -> ToolSpec | Callable[[Callable[..., Awaitable[Any]]], ToolSpec]:
    """Declare a tool from an async function: `@tool` or `@tool(requires_approval=...)`.

    Args:
        name: What the model calls it (default: the function's name).
        description: What the model reads (default: the docstring before its sections).
        requires_approval: True, or a predicate over the validated arguments (an instance of
            the arguments model, fields named as the function's parameters): the call runs
            only once a person approved it.
        approval: How long such a request waits, and what happens when nobody answers.
        stub: What answers a fork's call the recording has no result for, under the `stub`
            policy: a function of the arguments model (docs/forks.md).

    Raises:
        TypeError: the function is not async, has no description (neither a docstring with
            text before its sections nor `description=`), has an argument without a type
            annotation, or takes `*args`/`**kwargs`.
    """

    def declare(fn: Callable[..., Awaitable[Any]]) -> ToolSpec:
        spec = _declare(fn, name, description, requires_approval, approval or ApprovalPolicy())
        return spec if stub is None else dataclasses.replace(spec, stub=stub)

    return declare(fn) if fn is not None else declare


def _declare(
    fn: Callable[..., Awaitable[Any]],
    name: str | None,
    description: str | None,
    requires_approval: bool | Callable[[Any], bool],
    approval: ApprovalPolicy,
) -> ToolSpec:
    where = f"{fn.__module__}.{fn.__qualname__}"
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"tool {where} must be an async function")
    hints = get_type_hints(fn)
    summary, documented = _docstring(fn)
    fields: dict[str, Any] = {}
    context_name = None
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            stars = "*" if parameter.kind is parameter.VAR_POSITIONAL else "**"
            raise TypeError(f"tool {where} takes {stars}{parameter.name}: declare each argument")
        annotation = hints.get(parameter.name, inspect.Parameter.empty)
        if _is_context(annotation):
            context_name = parameter.name
            continue
        if annotation is inspect.Parameter.empty:
            raise TypeError(f"tool {where}: argument {parameter.name!r} has no type annotation")
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (
            annotation,
            Field(default, description=documented.get(parameter.name)),
        )
    description = (description or "").strip() or summary
    if not description:
        raise TypeError(
            f"tool {where} has no description, and the model would see only its name: give "
            "the function a docstring that says what it does, or @tool(description=...)"
        )
    tool_name = name or fn.__name__
    args_model: type[BaseModel] = create_model(
        f"{_camel(tool_name)}Args",
        __config__=ConfigDict(extra="forbid"),
        __module__=fn.__module__,
        **fields,
    )

    async def handler(args: BaseModel, context: RunContext[Any]) -> Any:
        values = {field: getattr(args, field) for field in fields}
        if context_name is not None:
            values[context_name] = context
        return await fn(**values)

    return ToolSpec(
        name=tool_name,
        description=description,
        args=args_model,
        handler=handler,
        takes_context=True,
        requires_approval=requires_approval,
        approval=approval,
    )


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^0-9a-zA-Z]+", name) if part)
