"""An MCP task's input requests read as questions: an elicitation whose form is malformed is
still a question (which the run then refuses, telling the task no at once), never dropped to
wait for the task's expiry."""

from __future__ import annotations

from typing import Any

import pytest

from waitstate.elicitation import schema_problem
from waitstate.mcp_tasks import questions_of

FORM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}}


def _elicit(schema: Any, message: Any = "Delete it?") -> dict[str, Any]:
    return {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": schema},
    }


def test_a_well_formed_elicitation_is_a_question_with_its_schema() -> None:
    [question] = questions_of({"k1": _elicit(FORM)})

    assert (question.key, question.message, question.requested_schema) == ("k1", "Delete it?", FORM)
    assert schema_problem(question.requested_schema) is None


@pytest.mark.parametrize(
    "schema", [["not", "a", "schema"], "object", 12, {"type": 12}, {"properties": "x"}]
)
def test_an_elicitation_with_a_malformed_form_is_asked_to_be_refused(schema: Any) -> None:
    [question] = questions_of({"k1": _elicit(schema, message=7)})

    assert question.key == "k1"
    assert question.message == ""  # not a string: not shown
    assert schema_problem(question.requested_schema) is not None


def test_requests_of_other_kinds_are_left_for_now() -> None:
    sampling = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}

    assert questions_of({"s": sampling, "junk": ["x"], "none": None}) == []
