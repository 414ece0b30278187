"""Scripts for runs whose long tool's job asks a question mid-flight (the demo's purge)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tests.script_steps import call, tool_results
from waitstate import App, Message, ToolDefinition


def purge(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Purges `staging_events`, then answers with the result it got."""
    results = tool_results(messages)
    if not results:
        return call(0, "purge_dataset", {"dataset": "staging_events"})
    return Message(role="assistant", content=f"got: {results[-1].content}")


def purge_confirming(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Purges `staging_events`; confirms the purge itself when the job asks it (a first answer
    that does not fit the question's schema, then one that does); waits; answers with every
    result it saw, one per line."""
    results = tool_results(messages)
    if not results:
        return call(0, "purge_dataset", {"dataset": "staging_events"})
    last = results[-1]
    if last.name == "purge_dataset" and '"questions"' in last.content:
        [question] = json.loads(last.content)["questions"]
        wrong = {"question_id": question["question_id"], "content": {"confirm": "yes"}}
        return call(len(results), "answer_question", wrong)
    if last.name == "answer_question" and last.is_error:
        question_id = json.loads(results[0].content)["questions"][0]["question_id"]
        right = {"question_id": question_id, "content": {"confirm": True}}
        return call(len(results), "answer_question", right)
    if last.name == "answer_question" and not last.content.startswith("{"):
        return Message(role="assistant", content=f"unexpected: {last.content}")
    if last.name == "answer_question":
        return call(len(results), "wait_for_operations", {})
    return Message(role="assistant", content="\n".join(f"{m.name}: {m.content}" for m in results))


app = App(scripts={"purge": purge, "purge-confirming": purge_confirming})
