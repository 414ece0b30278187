"""How the thread desk names what a thread or Temporal says: each client error is an HTTP status
and a code (`test_threads_http.py` meets most of them end to end; a thread that is closing
refuses for a moment only, so its case is here)."""

from __future__ import annotations

import pytest

from waitstate.client import (
    ClientError,
    MessageRefused,
    NotAnswered,
    OutcomeUnknown,
    RunNotFound,
    TemporalFailed,
    ThreadClosed,
    Unreachable,
)
from waitstate.gateway.delivery import refusal


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (ThreadClosed("t"), 410, "thread_closed"),
        (MessageRefused("t", "closing", "thread_closing"), 410, "thread_closing"),
        (MessageRefused("t", "busy", "thread_busy"), 409, "thread_busy"),
        (MessageRefused("t", "full", "thread_full"), 429, "thread_full"),
        (MessageRefused("t", "a task", "not_a_thread"), 409, "not_a_thread"),
        (MessageRefused("t", "who knows", None), 409, "message_refused"),
        (MessageRefused("t", "new", "some_new_refusal"), 409, "message_refused"),
        (RunNotFound("t"), 404, "unknown_thread"),
        (NotAnswered("t", "no worker"), 503, "thread_unavailable"),
        (Unreachable("down"), 503, "temporal_unavailable"),
        (TemporalFailed("sending", "permission denied"), 503, "temporal_unavailable"),
    ],
)
def test_each_client_error_is_a_status_and_a_code(
    error: ClientError, status: int, code: str
) -> None:
    refused = refusal(error, thread_id="t")

    assert (refused.status, refused.code) == (status, code)
    assert refused.message
    assert "permission denied" not in refused.message  # Temporal's own words stay in the log
    assert refused.retry_with == {}


def test_an_unknown_outcome_is_no_refusal_and_names_what_makes_its_retry_safe() -> None:
    message = refusal(OutcomeUnknown("t", "no answer within 20 s", "key-1"), thread_id="t")
    start = refusal(
        OutcomeUnknown("t", "no answer within 20 s", "key-2"), thread_id="t", start=True
    )

    assert (message.status, message.code) == (504, "outcome_unknown")
    assert message.retry_with == {"key": "key-1"}
    assert "key-1" in message.message
    assert (start.status, start.code) == (504, "outcome_unknown")
    assert start.retry_with == {"thread_id": "t", "key": "key-2"}
    assert "key-2" in start.message and "t" in start.message
