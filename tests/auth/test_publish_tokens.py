"""Publish tokens: a worker's right to hand one run's readers its model's text, and nothing
else; no other kind of token is one, and one is no other kind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from waitstate.auth.tokens import ExpiredToken, InvalidToken, ResumeTokens

TOKENS = ResumeTokens({"old": "o" * 40, "new": "n" * 40}, "new")
LATER = datetime(2030, 1, 1, tzinfo=UTC)


def test_a_publish_token_names_its_run_until_it_expires() -> None:
    token = TOKENS.mint_publish("run-1", LATER)

    claims = TOKENS.verify_publish(token, now=LATER - timedelta(seconds=1))

    assert (claims.run_id, claims.expires_at, claims.key_id) == ("run-1", LATER, "new")
    with pytest.raises(ExpiredToken):
        TOKENS.verify_publish(token, now=LATER)


def test_a_publish_token_is_no_other_kind_and_no_other_kind_is_one() -> None:
    publish = TOKENS.mint_publish("run-1", LATER)
    view = TOKENS.mint_view("run-1", LATER)  # the same claims, but its scope and label
    thread = TOKENS.mint_thread("run-1", LATER)
    resume = TOKENS.mint("run-1", "op-1", LATER, nonce="abcdefghijklmnopqrstuv").token

    for other in (view, thread, resume):
        with pytest.raises(InvalidToken):
            TOKENS.verify_publish(other)
    with pytest.raises(InvalidToken):
        TOKENS.verify_view(publish)
    with pytest.raises(InvalidToken):
        TOKENS.verify_thread(publish)
    with pytest.raises(InvalidToken):
        ResumeTokens({"new": "x" * 40}, "new").verify_publish(publish)  # another key


def test_a_publish_token_names_a_run_and_a_zone_aware_expiry() -> None:
    with pytest.raises(ValueError):
        TOKENS.mint_publish("", LATER)
    with pytest.raises(ValueError):
        TOKENS.mint_publish("run-1", LATER.replace(tzinfo=None))
