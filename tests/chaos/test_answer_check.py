"""The outsiders' check that a job got the valid answer once (`chaos.outsiders.answered_once`).

Full size, seed 6 (no query guard): chaos-a-22-pattern-purge-00's `answer_operation` was tried
twice (activity id 4, attempts 1 and 2, 31 s apart, across a server restart); the purge took
the first and refused the second as already answered, and the check called it two answers."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.outsiders import answered_once


def answer(applied: bool, *, action: str = "accept", reason: str | None = None) -> dict[str, Any]:
    return {
        "key": "confirm",
        "action": action,
        "responder": "chaos-link",
        "applied": applied,
        "reason": reason,
    }


def test_one_applied_answer_and_its_refused_retries_are_one_answer() -> None:
    assert answered_once([answer(True)])
    assert answered_once([answer(True), answer(False, reason="already answered")])


@pytest.mark.parametrize(
    "received",
    [
        [],
        [answer(True), answer(True)],  # applied twice
        [answer(True, action="decline")],
        [answer(True), answer(False, reason="expired")],  # refused for another reason
        [answer(True), answer(False, action="decline", reason="already answered")],
        [answer(False, reason="already answered")],  # never applied
    ],
    ids=["none", "twice", "declined", "other-refusal", "other-answer", "never-applied"],
)
def test_anything_else_is_not(received: list[dict[str, Any]]) -> None:
    assert not answered_once(received)
