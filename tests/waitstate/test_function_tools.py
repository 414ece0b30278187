"""`@tool` and `RunContext` (waitstate/tools/function.py): the arguments model and JSON schema
built from a function's signature, the descriptions taken from its docstring, the context a
handler may ask for, approvals, and how a call runs through a `ToolRegistry`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ValidationError

from tests.upstream import pydantic_says
from waitstate import RunContext, ToolError, ToolSpec, tool
from waitstate.schemas import ToolCall
from waitstate.tools.spec import ToolRegistry


@dataclass
class Crm:
    """A stand-in for what an app provides as its deps: records what the tools asked for."""

    customers: dict[str, str] = field(default_factory=lambda: {"C-118": "Ada Lovelace"})
    asked: list[tuple[str, str]] = field(default_factory=list)


@tool
async def search_orders(
    customer_id: str,
    limit: int = 10,
    include_closed: bool = False,
    status: Literal["open", "shipped"] = "open",
) -> list[str]:
    """Find a customer's orders,
    newest first.

    Args:
        customer_id: The customer's id,
            like "C-118".
        limit (int): How many orders to return.

    Returns:
        The order ids.
    """
    return [f"{customer_id}-{status}-{n}" for n in range(limit)]


@tool
async def lookup_customer(ctx: RunContext[Crm], customer_id: str) -> dict[str, Any]:
    """Look a customer up by id."""
    ctx.deps.asked.append((customer_id, ctx.idempotency_key))
    name = ctx.deps.customers.get(customer_id)
    if name is None:
        raise ToolError(f"no customer {customer_id!r}; check the id")
    return {
        "name": name,
        "run_id": ctx.run_id,
        "tool_call_id": ctx.tool_call_id,
        "idempotency_key": ctx.idempotency_key,
    }


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "call_1") -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=call_id, name=name, arguments=text)


def context(deps: Any = None) -> RunContext[Any]:
    return RunContext(run_id="run-7", tool_call_id="call_1", idempotency_key="run-7/1", deps=deps)


def test_decorated_function_becomes_a_sync_tool_spec_named_after_it() -> None:
    assert isinstance(search_orders, ToolSpec)
    assert search_orders.name == "search_orders"
    assert search_orders.kind == "sync"
    assert search_orders.takes_context is True
    assert search_orders.args.__name__ == "SearchOrdersArgs"


def test_schema_has_the_signature_types_defaults_and_required_arguments() -> None:
    schema = search_orders.args.model_json_schema()
    properties = schema["properties"]

    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["customer_id"]
    assert list(properties) == ["customer_id", "limit", "include_closed", "status"]
    assert properties["customer_id"]["type"] == "string"
    assert (properties["limit"]["type"], properties["limit"]["default"]) == ("integer", 10)
    assert (properties["include_closed"]["type"], properties["include_closed"]["default"]) == (
        "boolean",
        False,
    )
    assert properties["status"]["enum"] == ["open", "shipped"]
    assert properties["status"]["default"] == "open"


def test_definition_is_what_the_model_sees() -> None:
    definition = search_orders.definition()

    assert definition.name == "search_orders"
    assert definition.description == search_orders.description
    assert definition.parameters == search_orders.args.model_json_schema()


def test_arguments_model_validates_and_fills_defaults() -> None:
    args = search_orders.args.model_validate({"customer_id": "C-118"})

    assert args.model_dump() == {
        "customer_id": "C-118",
        "limit": 10,
        "include_closed": False,
        "status": "open",
    }
    with pytest.raises(ValidationError):
        search_orders.args.model_validate({"customer_id": "C-118", "status": "lost"})


def test_description_is_the_docstring_text_before_its_sections() -> None:
    assert search_orders.description == "Find a customer's orders, newest first."


def test_argument_descriptions_come_from_the_args_section_with_continuation_lines() -> None:
    properties = search_orders.args.model_json_schema()["properties"]

    assert properties["customer_id"]["description"] == 'The customer\'s id, like "C-118".'
    # A type in parentheses after the name is not part of the description.
    assert properties["limit"]["description"] == "How many orders to return."
    # Undocumented: no description; and the Returns section documents no argument.
    assert "description" not in properties["include_closed"]
    assert "description" not in properties["status"]


def test_continuation_line_starting_with_a_word_and_colon_stays_with_its_argument() -> None:
    @tool
    async def find(customer_id: str) -> str:
        """Find a customer.

        Args:
            customer_id: The customer's id.
                Format: C- then three digits.
        """
        return customer_id

    properties = find.args.model_json_schema()["properties"]

    assert properties["customer_id"]["description"] == (
        "The customer's id. Format: C- then three digits."
    )


def test_tool_without_a_description_is_refused() -> None:
    # The model would see only its name.
    async def ping(host: str) -> str:
        return host

    async def only_args(host: str) -> str:
        """
        Args:
            host: Where to.
        """
        return host

    for undescribed in (ping, only_args):
        with pytest.raises(TypeError, match=r"\.(ping|only_args) has no description, and the "):
            tool(undescribed)
        with pytest.raises(TypeError, match="has no description"):
            tool(description="  ")(undescribed)
    described = tool(description="Check that a host answers.")(ping)
    assert described.description == "Check that a host answers."
    assert "description" not in described.args.model_json_schema()["properties"]["host"]


def test_context_parameter_is_left_out_of_the_schema() -> None:
    schema = lookup_customer.args.model_json_schema()

    assert list(schema["properties"]) == ["customer_id"]
    assert schema["required"] == ["customer_id"]
    assert lookup_customer.description == "Look a customer up by id."


async def test_handler_gets_the_run_context_and_its_deps() -> None:
    crm = Crm()
    registry = ToolRegistry([lookup_customer])

    result = await registry.run(call("lookup_customer", {"customer_id": "C-118"}), context(crm))

    assert result.is_error is False
    assert (result.tool_call_id, result.name) == ("call_1", "lookup_customer")
    assert json.loads(result.content) == {
        "name": "Ada Lovelace",
        "run_id": "run-7",
        "tool_call_id": "call_1",
        "idempotency_key": "run-7/1",
    }
    assert crm.asked == [("C-118", "run-7/1")]


async def test_context_parameter_may_come_after_the_arguments() -> None:
    @tool
    async def tag(label: str, ctx: RunContext[Any]) -> str:
        """Tag the run."""
        return f"{label}@{ctx.run_id}"

    result = await ToolRegistry([tag]).run(call("tag", {"label": "urgent"}), context())

    assert list(tag.args.model_json_schema()["properties"]) == ["label"]
    assert (result.content, result.is_error) == ("urgent@run-7", False)


async def test_tool_without_context_parameter_runs_with_or_without_a_context() -> None:
    registry = ToolRegistry([add])

    with_context = await registry.run(call("add", {"a": 2, "b": 40}), context())
    without = await registry.run(call("add", {"a": 1, "b": 2}, call_id="call_2"))

    assert (with_context.content, with_context.is_error) == ("42", False)
    assert (without.tool_call_id, without.content, without.is_error) == ("call_2", "3", False)


async def test_name_and_description_given_to_the_decorator_replace_the_defaults() -> None:
    @tool(name="crm.find-customer", description="Find a customer in the CRM.")
    async def find(customer_id: str) -> str:
        """The docstring, which the decorator's description replaces."""
        return customer_id.upper()

    result = await ToolRegistry([find]).run(call("crm.find-customer", {"customer_id": "c-1"}))

    assert (find.name, find.description) == ("crm.find-customer", "Find a customer in the CRM.")
    assert find.args.__name__ == "CrmFindCustomerArgs"
    assert (result.name, result.content, result.is_error) == ("crm.find-customer", "C-1", False)


def test_tool_needs_no_approval_by_default() -> None:
    args = add.args.model_validate({"a": 1, "b": 2})

    assert add.requires_approval is False
    assert add.needs_approval(args) is False


def test_requires_approval_flag_applies_to_every_call() -> None:
    @tool(requires_approval=True)
    async def delete_account(customer_id: str) -> str:
        """Delete an account."""
        return customer_id

    args = delete_account.args.model_validate({"customer_id": "C-1"})

    assert delete_account.needs_approval(args) is True


def test_requires_approval_predicate_sees_the_validated_arguments() -> None:
    seen: list[BaseModel] = []

    def over_100(args: Any) -> bool:
        seen.append(args)
        return bool(args.amount > 100)

    @tool(requires_approval=over_100)
    async def refund(claim_id: str, amount: float) -> str:
        """Refund a claim."""
        return f"refunded {amount} on {claim_id}"

    registry = ToolRegistry([refund])
    small = registry.parse(call("refund", {"claim_id": "C-118", "amount": 20}))
    large = registry.parse(call("refund", {"claim_id": "C-118", "amount": "420.5"}))
    assert isinstance(small, tuple)
    assert isinstance(large, tuple)

    assert small[0].needs_approval(small[1]) is False
    assert large[0].needs_approval(large[1]) is True
    assert [type(args) for args in seen] == [refund.args, refund.args]
    # Validated: the string "420.5" reached the predicate as a float.
    assert [args.model_dump() for args in seen][1] == {"claim_id": "C-118", "amount": 420.5}


@pytest.mark.parametrize(
    ("arguments", "field", "kind"),
    [
        ({"a": 1}, "b", "missing"),
        ({"a": 1, "b": "two"}, "b", "int_parsing"),
        ({"a": 1, "b": 2, "c": 3}, "c", "extra_forbidden"),
    ],
)
async def test_wrong_arguments_come_back_as_an_error_naming_the_field(
    arguments: dict[str, Any], field: str, kind: str
) -> None:
    ran: list[tuple[int, int]] = []

    @tool(name="add")
    async def recording_add(a: int, b: int) -> int:
        """Add two integers."""
        ran.append((a, b))
        return a + b

    result = await ToolRegistry([recording_add]).run(call("add", arguments), context())

    # The field is ours to name; why, pydantic's to say (of the model `tool` built, which must
    # refuse the arguments as `kind`: an unknown argument included).
    why = pydantic_says(recording_add.args, arguments, kind)
    assert result.is_error is True
    assert (result.tool_call_id, result.name) == ("call_1", "add")
    assert result.content == f"invalid arguments for add: {field}: {why}"
    assert ran == []


async def test_tool_error_from_the_handler_comes_back_as_an_error_result() -> None:
    crm = Crm()

    result = await ToolRegistry([lookup_customer]).run(
        call("lookup_customer", {"customer_id": "C-999"}), context(crm)
    )

    assert result.is_error is True
    assert result.content == "no customer 'C-999'; check the id"
    assert crm.asked == [("C-999", "run-7/1")]


async def test_other_exception_from_the_handler_propagates() -> None:
    @tool
    async def flaky(n: int) -> int:
        """Fail."""
        raise ConnectionError(f"connection reset on attempt {n}")

    with pytest.raises(ConnectionError, match="connection reset on attempt 3"):
        await ToolRegistry([flaky]).run(call("flaky", {"n": 3}), context())


def test_sync_function_is_refused() -> None:
    def not_async(x: int) -> int:
        return x

    with pytest.raises(TypeError, match=r"not_async must be an async function"):
        tool(not_async)  # type: ignore[arg-type]


def test_argument_without_annotation_is_refused() -> None:
    async def untyped(x, y: int) -> int:  # type: ignore[no-untyped-def]
        return int(y)

    with pytest.raises(TypeError, match=r"untyped: argument 'x' has no type annotation"):
        tool(untyped)


def test_star_args_are_refused() -> None:
    async def total(*numbers: int) -> int:
        return sum(numbers)

    with pytest.raises(TypeError, match=r"total takes \*numbers: declare each argument"):
        tool(total)


def test_star_star_kwargs_are_refused() -> None:
    async def options(**values: str) -> str:
        return ",".join(values)

    with pytest.raises(TypeError, match=r"options takes \*+values"):
        tool(options)
