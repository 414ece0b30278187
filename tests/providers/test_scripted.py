"""The scripted provider: deterministic conversations, driven through `complete()`."""

from __future__ import annotations

import json

import pytest

from examples.demo.basic import CalculateArgs, demo_tools
from tests.upstream import pydantic_says
from waitstate.providers import UnknownModelError
from waitstate.providers.scripted import (
    SCRIPTED_BANNER,
    SCRIPTS,
    ScriptedProvider,
    questions_for_the_model,
)
from waitstate.schemas import Message, ModelResponse, ToolDefinition
from waitstate.tools import ToolRegistry

TOOLS = [spec.definition() for spec in demo_tools()]
TASK = "What is 12 * 12? Then count the words of this task."


async def complete(
    script: str, messages: list[Message], tools: list[ToolDefinition] = TOOLS
) -> ModelResponse:
    return await ScriptedProvider().complete(script, "Be brief.", messages, tools)


async def converse(
    script: str, task: str = TASK, tools: list[ToolDefinition] = TOOLS, max_turns: int = 6
) -> list[Message]:
    """Play a script against the real demo tools until it answers or runs out of turns."""
    registry = ToolRegistry(demo_tools())
    messages = [Message(role="user", content=task)]
    for _ in range(max_turns):
        reply = (await complete(script, messages, tools)).message
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            result = await registry.run(call)
            answer = result.model_dump(include={"name", "tool_call_id", "content", "is_error"})
            messages.append(Message(role="tool", **answer))
    return messages


def calls(message: Message) -> list[tuple[str, dict[str, object]]]:
    return [(call.name, json.loads(call.arguments)) for call in message.tool_calls]


def replies(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.role == "assistant"]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
async def test_every_script_is_deterministic(script: str) -> None:
    messages = await converse(script)

    # Asked again at every point of the conversation, the script says exactly the same.
    for i, message in enumerate(messages):
        if message.role == "assistant":
            first = await complete(script, messages[:i])
            again = await complete(script, messages[:i])
            assert first == again
            assert first.message == message


@pytest.mark.parametrize(
    "script", sorted(set(SCRIPTS) - {"forever", "long-haul"})
)  # never end in 6 turns
async def test_every_final_answer_starts_with_the_banner(script: str) -> None:
    final = (await converse(script))[-1]

    assert final.role == "assistant"
    assert final.tool_calls == []
    assert final.content.startswith(f"{SCRIPTED_BANNER} ")


async def test_demo_conversation() -> None:
    messages = await converse("demo")

    first, second, answer = replies(messages)
    assert calls(first) == [("calculate", {"expression": "12 * 12"}), ("utc_now", {})]
    assert calls(second) == [("count_words", {"text": TASK})]
    assert answer.content.startswith(f"{SCRIPTED_BANNER} Task: {TASK!r}. Results: ")
    assert "calculate -> 144" in answer.content
    assert 'count_words -> {"words": 12, "lines": 1, "characters": 51}' in answer.content
    assert "utc_now -> 20" in answer.content


@pytest.mark.parametrize(
    ("task", "expression"),
    [
        ("Say hello.", "6 * 7"),
        ("Add 2.5 + 4 for me", "2.5 + 4"),
        ("What is 2 ** 10 // 3?", "2 ** 10 // 3"),
        ("Compute 2 + 3 * (4 - 1), please.", "2 + 3 * (4 - 1)"),
        # Whole expressions: a leading parenthesis or minus sign is part of them.
        ("What is (3 + 4) * 5?", "(3 + 4) * 5"),
        ("What is -5 + 3?", "-5 + 3"),
    ],
)
async def test_demo_calculates_the_arithmetic_in_the_task(task: str, expression: str) -> None:
    reply = await complete("demo", [Message(role="user", content=task)])

    assert calls(reply.message)[0] == ("calculate", {"expression": expression})


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        (["utc_now"], [["utc_now"]]),
        (["calculate", "count_words"], [["calculate"], ["count_words"]]),
        # count_words once, not again each turn.
        (["count_words"], [["count_words"]]),
        ([], []),
    ],
)
async def test_demo_only_calls_offered_tools(offered: list[str], expected: list[list[str]]) -> None:
    tools = [tool for tool in TOOLS if tool.name in offered]

    *asked, answer = replies(await converse("demo", tools=tools))

    assert [[name for name, _ in calls(reply)] for reply in asked] == expected
    assert answer.content.startswith(SCRIPTED_BANNER)


async def test_demo_without_tools_says_so() -> None:
    reply = await complete("demo", [Message(role="user", content="hi")], tools=[])

    assert reply.message.content == f"{SCRIPTED_BANNER} Task: 'hi'. Results: no tools were used."


def offered(*names: str) -> list[ToolDefinition]:
    """Tools of these names, as the model sees them (their schemas do not matter here)."""
    return [ToolDefinition(name=name, description=name, parameters={}) for name in names]


def result(call_id: str, name: str, content: object) -> Message:
    text = content if isinstance(content, str) else json.dumps(content)
    return Message(role="tool", tool_call_id=call_id, name=name, content=text)


async def test_demo_as_a_lead_starts_every_sub_agent_at_once_then_reports_what_each_said() -> None:
    tools = offered("agent_researcher", "agent_data-researcher")
    task = [Message(role="user", content="Research claim C-118")]

    plan = (await complete("demo", task, tools)).message

    assert plan.content.startswith("Plan: researcher, data-researcher")
    assert calls(plan) == [
        ("agent_researcher", {"task": "As researcher, your part of: Research claim C-118"}),
        (
            "agent_data-researcher",
            {"task": "As data-researcher, your part of: Research claim C-118"},
        ),
    ]
    found = {"agent": "researcher-1", "status": "completed", "answer": f"{SCRIPTED_BANNER} x"}
    failed = {"agent": "data-researcher-2", "status": "failed", "error": "no export"}
    first, second = plan.tool_calls
    said = [
        *task,
        plan,
        result(first.id, first.name, found),
        result(second.id, second.name, failed),
    ]
    report = (await complete("demo", said, tools)).message

    assert report.tool_calls == []
    assert report.content == (
        f"{SCRIPTED_BANNER} Report: Research claim C-118\n"
        "- researcher-1: x\n- data-researcher-2: no export"
    )


@pytest.mark.parametrize(
    ("tool", "content", "answer"),
    [
        (
            "check_claim",
            {"claim_id": "C-118", "valid": True, "amount": 420.0, "customer": "Dana Whitfield"},
            "Claim C-118 is valid: $420 for Dana Whitfield.",
        ),
        (
            "read_payment_history",
            {"claim_id": "C-118", "refunds": [{"refund_id": "rfd_1"}], "refunded": 420.0},
            "Refunded on claim C-118 so far: $420 (1 refund).",
        ),
        (
            "read_payment_history",
            "rejected by ana: not for this audit",
            'The payments on claim C-118 could not be read: {"error": '
            '"rejected by ana: not for this audit"}.',
        ),
    ],
)
async def test_demo_researches_the_claim_its_task_names(
    tool: str, content: object, answer: str
) -> None:
    tools = offered(tool)
    task = [Message(role="user", content="As researcher, your part of: research claim c-118")]

    ask = (await complete("demo", task, tools)).message
    assert calls(ask) == [(tool, {"claim_id": "C-118"})]
    said = [*task, ask, result(ask.tool_calls[0].id, tool, content)]
    reply = (await complete("demo", said, tools)).message

    assert reply.content == f"{SCRIPTED_BANNER} {answer}"


async def test_demo_exports_and_checks_the_count_without_filing_when_it_has_no_tools_to() -> None:
    tools = offered("start_export", "verify_row_count")
    said = [Message(role="user", content="Research the Q3 transactions export")]
    done = [
        ("start_export", {"status": "succeeded", "result": {"file": "f.csv", "rows": 7}}),
        ("verify_row_count", {"file": "f.csv", "rows": 7, "matches": True}),
    ]
    for tool, content in done:
        ask = (await complete("demo", said, tools)).message
        assert [name for name, _ in calls(ask)] == [tool]
        said += [ask, result(ask.tool_calls[0].id, tool, content)]
    reply = (await complete("demo", said, tools)).message

    assert reply.content == (
        f"{SCRIPTED_BANNER} Exported 7 transactions rows for 2025-Q3 to f.csv; "
        "the row count checks out."
    )


async def test_forever_never_answers() -> None:
    messages = await converse("forever", max_turns=20)

    asked = replies(messages)
    assert len(asked) == 20
    assert all(
        calls(reply) == [("calculate", {"expression": f"{turn} + 1"})]
        for turn, reply in enumerate(asked)
    )


async def test_fix_args_corrects_its_call_after_an_error() -> None:
    messages = await converse("fix-args")

    wrong, fixed, answer = replies(messages)
    assert calls(wrong) == [("calculate", {"expr": "2 + 2"})]
    error = messages[messages.index(wrong) + 1]
    assert error.is_error is True
    missing = pydantic_says(CalculateArgs, {"expr": "2 + 2"}, "missing")
    assert error.content == f"invalid arguments for calculate: expression: {missing}"
    assert calls(fixed) == [("calculate", {"expression": "2 + 2"})]
    assert answer.content == f"{SCRIPTED_BANNER} 2 + 2 = 4"


async def test_unknown_script_is_an_unknown_model() -> None:
    with pytest.raises(UnknownModelError, match="no script named 'nope'; scripts: .*demo, echo"):
        await complete("nope", [Message(role="user", content="hi")])


@pytest.mark.parametrize("script", sorted(SCRIPTS))
async def test_usage_and_stop_reason(script: str) -> None:
    response = await complete(script, [Message(role="user", content=TASK)])

    assert response.usage.model_calls == 1
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0
    assert response.model == f"scripted:{script}"
    expected_stop = "tool_calls" if response.message.tool_calls else "stop"
    assert response.stop_reason == expected_stop


async def test_extra_scripts_can_be_registered() -> None:
    def shout(messages: object, tools: object) -> Message:
        return Message(role="assistant", content="HI")

    provider = ScriptedProvider({"shout": shout})
    response = await provider.complete("shout", "", [Message(role="user", content="hi")], [])

    assert response.message.content == "HI"
    assert "shout" in provider.names()
    assert "demo" in provider.names()


async def test_a_script_with_a_third_parameter_is_given_the_system_prompt() -> None:
    def obey(messages: object, tools: object, system_prompt: str) -> Message:
        return Message(role="assistant", content=f"told: {system_prompt}")

    def shout(messages: object, tools: object, /) -> Message:
        return Message(role="assistant", content="HI")

    provider = ScriptedProvider({"obey": obey, "shout": shout})
    hi = [Message(role="user", content="hi")]

    assert (await provider.complete("obey", "Be brief.", hi, [])).message.content == (
        "told: Be brief."
    )
    assert (await provider.complete("shout", "Be brief.", hi, [])).message.content == "HI"


def test_the_questions_for_the_model_are_those_of_open_operations_it_answers() -> None:
    mine = {"question_id": "q_1", "answered_by": "you (answer_question)"}
    theirs = {"question_id": "q_2", "answered_by": "a person"}
    ended = {"question_id": "q_3", "answered_by": "you (answer_question)"}
    waited = [
        {"operation_id": "op_1", "status": "input_required", "questions": [mine, theirs]},
        {"operation_id": "op_2", "status": "succeeded", "questions": [ended]},
        {"operation_id": "op_3", "status": "running"},
    ]

    assert questions_for_the_model(json.dumps(waited)) == [mine]


@pytest.mark.parametrize("content", ["not json", '{"status": "running"}', '["op_1", 2]', "[]"])
def test_no_questions_for_the_model_in_anything_else(content: str) -> None:
    assert questions_for_the_model(content) == []
