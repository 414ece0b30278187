"""An MCP task's input requests read as questions: an elicitation whose form is malformed is
still a question (which the run then refuses, telling the task no at once), never dropped to
wait for the task's expiry."""

from __future__ import annotations

from typing import Any

import pytest

from waitstate.elicitation import schema_problem
from waitstate.mcp.results import MAX_URL_CHARS, questions_of
from waitstate.schemas.questions import MAX_MESSAGE_CHARS

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


def test_a_url_elicitation_is_a_question_that_shows_its_address() -> None:
    url = "https://partner.example/consent?session=a1"
    elicit = {
        "method": "elicitation/create",
        "params": {
            "mode": "url",
            "message": "Grant access to the ledger.",
            "url": url,
            "elicitationId": "e-1",
        },
    }

    [question] = questions_of({"k1": elicit})

    assert question.message.startswith("Grant access to the ledger.")
    assert question.message.endswith(f"Open this address, then accept or decline: {url}")
    # No form: its answer is an accept or a decline.
    assert question.requested_schema == {"type": "object", "properties": {}}
    assert schema_problem(question.requested_schema) is None


def test_a_long_url_elicitation_is_cut_to_a_questions_bounds_keeping_its_address() -> None:
    url = "https://partner.example/" + "p" * 5_000
    elicit = {
        "method": "elicitation/create",
        "params": {"mode": "url", "message": "m" * 6_000, "url": url, "elicitationId": "e-2"},
    }

    [question] = questions_of({"k1": elicit})

    assert len(question.message) == MAX_MESSAGE_CHARS
    assert question.message.endswith(url[:MAX_URL_CHARS])
