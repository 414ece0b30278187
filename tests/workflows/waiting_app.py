"""Scripts for runs that start a job in handle mode and wait for it with `wait_for_operations`
while its job asks the model a question (issue 22, defect 5): the model answers it with
`answer_question`, waits again, and answers with every result it saw, one per line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.script_steps import call, tool_results
from waitstate import App, Message, RunResult, Script, ToolDefinition
from waitstate.providers.scripted import questions_for_the_model


def wait_and_answer(tool: str, arguments: dict[str, Any], content: dict[str, Any]) -> Script:
    """Call `tool` (a handle comes back), wait for operations, answer a question the wait
    brings with `content`, wait again; then answer with every result, one per line."""

    def script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
        results = tool_results(messages)
        if not results:
            return call(0, tool, arguments)
        last = results[-1]
        if last.name in (tool, "answer_question"):
            return call(len(results), "wait_for_operations", {})
        if last.name == "wait_for_operations" and (asking := questions_for_the_model(last.content)):
            answer = {"question_id": asking[0]["question_id"], "content": content}
            return call(len(results), "answer_question", answer)
        return Message(
            role="assistant", content="\n".join(f"{m.name}: {m.content}" for m in results)
        )

    return script


def results_seen(result: RunResult, tool: str) -> list[str]:
    """What a `wait_and_answer` run that called `tool` answered with: the result of `tool`, of
    the wait, of `answer_question` and of the second wait, once it is checked that the run
    completed and saw those four, in that order."""
    assert result.status == "completed", result.error
    lines = (result.final_output or "").splitlines()
    assert [line.split(":")[0] for line in lines] == [
        tool,
        "wait_for_operations",
        "answer_question",
        "wait_for_operations",
    ], lines
    return [line.split(": ", 1)[1] for line in lines]


app = App(
    scripts={
        "purge-wait-answer": wait_and_answer(
            "purge_dataset", {"dataset": "staging_events"}, {"confirm": True}
        ),
        "publish-wait-answer": wait_and_answer(
            "reports__publish_report", {"region": "emea"}, {"channel": "email"}
        ),
    }
)
