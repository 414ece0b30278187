"""The thread doors' check (`chaos.thread_doors.check`): every message sent once is in its thread
once, counted by its key; a planted duplicate, a planted loss, and a message no key of the
sender's names are each caught."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chaos.thread_doors import Sent, check
from waitstate.schemas.threads import ThreadMessage, ThreadState

T = "chaos-thread-1"
SENT = [
    Sent(T, "start", "twice", ["201", "201"]),
    Sent(T, "twice", "twice", ["202", "202"]),
    Sent(T, "lost", "lost answer", ["ReadTimeout", "202"]),
    Sent(T, "key-from-the-gateway", "no worker", ["504 outcome_unknown", "202"]),
]


def thread(*keys: str | None) -> ThreadState:
    messages = [
        ThreadMessage(message_id=f"m{n}", key=key, text="hi", sent_at=datetime.now(UTC))
        for n, key in enumerate(keys, 1)
    ]
    return ThreadState(messages=messages, received=len(messages))


def test_each_message_once_is_no_violation() -> None:
    row = check(SENT, {T: thread("start", "twice", "lost", "key-from-the-gateway")})

    assert row.ok, row.violations
    assert row.attempts == 4
    assert "0 duplicates, 0 lost" in row.outcome
    assert "1 no worker" in row.outcome and "1×504 outcome_unknown" in row.outcome


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        (("start", "twice", "twice", "lost", "key-from-the-gateway"), "1 duplicates, 0 lost"),
        (("start", "twice", "key-from-the-gateway"), "0 duplicates, 1 lost"),
        # The retry of a 504 sent without the key it named: a second message.
        (("start", "twice", "lost", "key-from-the-gateway", None), "1 duplicates, 0 lost"),
    ],
    ids=["taken-twice", "lost", "retried-without-its-key"],
)
def test_a_planted_duplicate_or_loss_is_a_violation(
    keys: tuple[str | None, ...], said: str
) -> None:
    row = check(SENT, {T: thread(*keys)})

    assert not row.ok
    assert said in row.outcome, row.outcome


def test_a_message_never_named_or_a_thread_not_read_is_lost() -> None:
    unnamed = Sent(None, None, "no worker", ["503 temporal_unavailable", "gave up"])
    row = check([*SENT, unnamed], {T: None})

    assert not row.ok
    assert "0 duplicates, 5 lost" in row.outcome, row.outcome
    assert any("never named" in v for v in row.violations)
    assert any("did not answer" in v for v in row.violations)
