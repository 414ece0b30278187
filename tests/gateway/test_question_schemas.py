"""A job's report that asks a question in a schema no answer could fit is refused with 422
before anything reaches the run (the real runs are in tests/workflows/test_hostile_questions.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import assert_error
from tests.rigs import OP, Gateway

URL = f"/v1/operations/{OP}/complete"
CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}}


def _asking(*schemas: Any) -> dict[str, Any]:
    questions = [
        {"key": f"q{i}", "message": "Sure?", "requested_schema": schema}
        for i, schema in enumerate(schemas)
    ]
    return {"status": "input_required", "questions": questions}


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"type": 12}, 'the schema\'s type must be "object"'),
        ({"$ref": "https://schemas.example/a.json"}, "the schema: $ref not allowed"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}}, "properties.a: $ref"),
        ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)"}}}, "RE2"),
    ],
)
async def test_a_question_in_a_schema_no_answer_fits_is_refused_and_not_delivered(
    gw: Gateway, schema: Any, says: str
) -> None:
    response = await gw.client.post(URL, json=_asking(CONFIRM, schema), headers=gw.auth())

    message = assert_error(response, 422, "invalid_question")
    assert message.startswith("questions.1 ('q1').requested_schema: ") and says in message
    assert gw.deliverer.calls == []


async def test_a_question_in_an_elicitation_schema_is_delivered(gw: Gateway) -> None:
    response = await gw.client.post(URL, json=_asking(CONFIRM), headers=gw.auth())

    assert response.status_code == 200, response.text
    [(_, completion, _)] = gw.deliverer.calls
    assert completion.questions is not None
    assert completion.questions[0].requested_schema == CONFIRM
