"""Amounts as people read them: time spans in their units, counts with their noun."""

from __future__ import annotations

from datetime import timedelta

import pytest

from waitstate.wording import count_of, span


@pytest.mark.parametrize(
    ("delta", "said"),
    [
        (timedelta(seconds=2.282201), "2.3 s"),
        (timedelta(milliseconds=50), "0.05 s"),
        (timedelta(0), "0 s"),
        (timedelta(seconds=45), "45 s"),
        (timedelta(seconds=59.7), "1 min"),
        (timedelta(minutes=5, seconds=12), "5 min 12 s"),
        (timedelta(hours=1, minutes=30), "1 h 30 min"),
        (timedelta(hours=12), "12 h"),
        (timedelta(days=30), "30 days"),
        (timedelta(days=1, hours=2, minutes=3), "1 day 2 h"),
        (timedelta(days=1), "1 day"),
    ],
)
def test_a_span_is_said_in_its_largest_units(delta: timedelta, said: str) -> None:
    assert span(delta) == said


def test_a_count_takes_its_noun_singular_for_one_only() -> None:
    assert count_of(1, "tool call") == "1 tool call"
    assert count_of(2, "tool call") == "2 tool calls"
    assert count_of(0, "tool call") == "0 tool calls"
    assert count_of(3, "reply", "replies") == "3 replies"
