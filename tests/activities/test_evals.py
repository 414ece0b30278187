"""An evaluation's comparison and scoring, without a server: structured answers diffed field by
field, and a scorer's verdict however the app's scorer behaves."""

from __future__ import annotations

import time

import pytest

from activities import evals
from activities.evals import _score, as_json, changed_fields
from waitstate.schemas.evals import EvalCase, FieldChange, Score

CASE = EvalCase(
    run_id="run-1",
    fork_id="eval-1/1",
    task="triage claim c-7",
    original_answer='{"decision": "pay", "amount": 40}',
    new_answer="I would pay it.",
    original_status="completed",
    new_status="output_invalid",
    original_tools=["lookup"],
    new_tools=["lookup"],
)


def test_structured_answers_are_compared_field_by_field_nested_by_path() -> None:
    original = {"decision": "pay", "amount": 40, "why": {"policy": "p1", "score": 3}}
    new = {"decision": "review", "amount": 40, "why": {"policy": "p2", "score": 3}, "extra": None}

    assert changed_fields(original, new) == [
        FieldChange(field="decision", original="pay", new="review"),
        FieldChange(field="extra", original=None, new=None),
        FieldChange(field="why.policy", original="p1", new="p2"),
    ]
    assert changed_fields(original, original) == []
    assert changed_fields(original, "prose") is None


def test_an_answer_is_structured_only_when_it_is_a_json_object_or_array() -> None:
    assert as_json('  {"a": 1}') == {"a": 1}
    assert as_json("[1, 2]") == [1, 2]
    assert as_json("{not json") is None
    assert as_json("42") is None
    assert as_json(None) is None


async def test_a_scorer_may_answer_a_bool_a_score_or_a_pair() -> None:
    assert await _score("a", lambda case: True, CASE) == Score(name="a", passed=True)
    said = await _score("b", lambda case: Score(name="other", passed=False, detail="x" * 900), CASE)
    assert said.name == "b" and not said.passed and len(said.detail) == evals.DETAIL_CHARS
    assert await _score("c", lambda case: (False, "wrong"), CASE) == Score(
        name="c", passed=False, detail="wrong"
    )


async def test_a_scorer_that_raises_answers_otherwise_or_hangs_fails_the_run_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def raises(case: EvalCase) -> bool:
        raise KeyError("decision")

    raised = await _score("raises", raises, CASE)
    assert not raised.passed and "KeyError" in raised.detail

    odd = await _score("odd", lambda case: 0.9, CASE)  # type: ignore[arg-type,return-value]
    assert not odd.passed and "float" in odd.detail

    monkeypatch.setattr(evals, "SCORER_TIMEOUT", 0.2)
    slow = await _score("slow", lambda case: time.sleep(2) or True, CASE)
    assert not slow.passed and "took over 0.2 s" in slow.detail


async def test_a_stub_answers_a_forks_call_and_one_that_fails_is_told_to_the_model() -> None:
    from activities.tools import stubbed
    from waitstate import tool
    from waitstate.schemas import ToolCall

    def refund_stub(args: object) -> dict[str, object]:
        return {"refunded": getattr(args, "amount", None), "stub": True}

    def broken_stub(args: object) -> str:
        raise RuntimeError("no stub data")

    async def refund(claim: str, amount: int) -> str:
        """Refund a claim."""
        raise AssertionError("a stubbed call never runs the tool")

    call = ToolCall(id="c1", name="refund", arguments='{"claim": "c-1", "amount": 5}')
    args = {"claim": "c-1", "amount": 5}
    stubbed_spec = tool(stub=refund_stub)(refund)
    result = await stubbed(stubbed_spec, stubbed_spec.args(**args), call)
    assert (result.content, result.is_error) == ('{"refunded": 5, "stub": true}', False)

    broken = tool(stub=broken_stub)(refund)
    result = await stubbed(broken, broken.args(**args), call)
    assert result.is_error and "stub failed: RuntimeError: no stub data" in result.content

    bare = tool(refund)
    result = await stubbed(bare, bare.args(**args), call)
    assert result.is_error and result.content.startswith(
        "unavailable in this fork: refund has no stub"
    )
