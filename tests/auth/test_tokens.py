"""Resume tokens: minted by activities, verified by the gateway, with rotatable keys."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from waitstate.auth.tokens import (
    MAX_TOKEN_CHARS,
    ExpiredToken,
    InvalidToken,
    ResumeClaims,
    ResumeTokens,
    ThreadClaims,
    ViewClaims,
    approval_subject,
    nonce_hash,
)
from waitstate.settings import Settings

OLD = "old-key-0123456789abcdef0123456789abcdef"
NEW = "new-key-0123456789abcdef0123456789abcdef"
NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EXPIRES = NOW + timedelta(hours=1)


def tokens(keys: dict[str, str] | None = None, signing: str = "k1") -> ResumeTokens:
    return ResumeTokens(keys or {"k1": OLD}, signing)


def test_round_trip_returns_the_claims() -> None:
    minted = tokens().mint("run-1", "op_1", EXPIRES)

    claims = tokens().verify(minted.token, now=NOW)

    assert claims == ResumeClaims(
        workflow_id="run-1",
        operation_id="op_1",
        nonce=claims.nonce,
        expires_at=EXPIRES,
        key_id="k1",
    )
    assert minted.nonce_hash == nonce_hash(claims.nonce)
    assert claims.expires_at.tzinfo is not None


def test_expiry_in_another_timezone_round_trips_to_the_same_instant() -> None:
    paris = EXPIRES.astimezone(datetime.fromisoformat("2030-01-01T00:00+01:00").tzinfo)
    claims = tokens().verify(tokens().mint("run-1", "op_1", paris).token, now=NOW)
    assert claims.expires_at == EXPIRES


def test_minting_is_deterministic() -> None:
    # A retried start activity must hand out the token the external system already has.
    first = tokens().mint("run-1", "op_1", EXPIRES)
    second = tokens().mint("run-1", "op_1", EXPIRES)

    assert first == second
    assert (
        tokens().verify(first.token, now=NOW).nonce == tokens().verify(second.token, now=NOW).nonce
    )


def test_nonce_differs_per_operation_run_and_key() -> None:
    def nonce(workflow_id: str, operation_id: str, key: str = OLD) -> str:
        verifier = tokens({"k1": key})
        return verifier.verify(
            verifier.mint(workflow_id, operation_id, EXPIRES).token, now=NOW
        ).nonce

    nonces = {
        nonce("run-1", "op_1"),
        nonce("run-1", "op_2"),
        nonce("run-2", "op_1"),
        nonce("run-1", "op_1", NEW),
    }
    assert len(nonces) == 4
    assert all(len(n) == 22 for n in nonces)


def _forged(token: str, **changes: str) -> str:
    """`token` with its claims changed, and its signature kept (that of the claims it had)."""
    payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{forged}.{signature}"


def test_tampered_payload_is_invalid() -> None:
    token = tokens().mint("run-1", "op_1", EXPIRES).token
    forged = _forged(token, op="op_2")

    with pytest.raises(InvalidToken):
        tokens().verify(forged, now=NOW)


def test_tampered_signature_is_invalid() -> None:
    token = tokens().mint("run-1", "op_1", EXPIRES).token
    flipped = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]

    with pytest.raises(InvalidToken):
        tokens().verify(flipped, now=NOW)


def test_token_of_an_unknown_key_is_invalid() -> None:
    token = ResumeTokens({"other": NEW}, "other").mint("run-1", "op_1", EXPIRES).token

    with pytest.raises(InvalidToken, match="unknown key"):
        tokens().verify(token, now=NOW)


def test_same_key_id_with_another_secret_is_invalid() -> None:
    token = ResumeTokens({"k1": NEW}, "k1").mint("run-1", "op_1", EXPIRES).token

    with pytest.raises(InvalidToken, match="signature"):
        tokens().verify(token, now=NOW)


def test_rotation_keeps_tokens_of_the_old_key_valid() -> None:
    old_token = ResumeTokens({"old": OLD}, "old").mint("run-1", "op_1", EXPIRES).token
    rotated = ResumeTokens({"old": OLD, "new": NEW}, "new")
    new_token = rotated.mint("run-1", "op_2", EXPIRES).token

    assert rotated.verify(old_token, now=NOW).key_id == "old"
    assert rotated.verify(new_token, now=NOW).key_id == "new"


def test_expired_token_raises_expired() -> None:
    token = tokens().mint("run-1", "op_1", EXPIRES).token

    with pytest.raises(ExpiredToken):
        tokens().verify(token, now=EXPIRES)
    with pytest.raises(ExpiredToken):
        tokens().verify(token, now=EXPIRES + timedelta(days=1))
    assert tokens().verify(token, now=EXPIRES - timedelta(microseconds=1)).operation_id == "op_1"


def test_expired_token_with_a_bad_signature_is_invalid_not_expired() -> None:
    token = tokens().mint("run-1", "op_1", NOW - timedelta(hours=1)).token
    with pytest.raises(InvalidToken):
        tokens().verify(token[:-1] + ("A" if token[-1] != "A" else "B"), now=NOW)


def test_the_signed_claims_of_an_expired_token_are_read_and_a_forged_one_is_still_invalid() -> None:
    past = datetime.now(UTC) - timedelta(days=1)
    minted = tokens().mint("run-1", "op_1", past)

    claims = tokens().signed_claims(minted.token)

    assert (claims.workflow_id, claims.operation_id, claims.expires_at) == ("run-1", "op_1", past)
    assert nonce_hash(claims.nonce) == minted.nonce_hash
    forged = minted.token[:-1] + ("A" if minted.token[-1] != "A" else "B")
    with pytest.raises(InvalidToken):
        tokens().signed_claims(forged)
    with pytest.raises(InvalidToken):
        tokens().signed_claims(tokens().mint_thread("thread-1", past))


def test_a_token_has_one_spelling_its_unused_bits_set_is_not_it() -> None:
    # A 32-byte MAC is 43 base64url characters: the last carries 4 bits of it and 2 unused.
    # Setting those decodes to the same MAC; the token is refused all the same, so no one can
    # present a valid token under a second string.
    minted = tokens().mint("run-1", "op_1", NOW + timedelta(hours=1)).token
    payload, signature = minted.split(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(signature[-1])
    assert last % 4 == 0  # the canonical spelling leaves them clear
    respelled = f"{payload}.{signature[:-1]}{alphabet[last + 1]}"

    assert tokens().verify(minted, now=NOW).operation_id == "op_1"
    with pytest.raises(InvalidToken, match="not a resume token"):
        tokens().verify(respelled, now=NOW)


def test_verify_defaults_to_the_current_time() -> None:
    valid = tokens().mint("run-1", "op_1", datetime.now(UTC) + timedelta(minutes=5)).token
    stale = tokens().mint("run-1", "op_1", datetime.now(UTC) - timedelta(minutes=5)).token

    assert tokens().verify(valid).operation_id == "op_1"
    with pytest.raises(ExpiredToken):
        tokens().verify(stale)


@pytest.mark.parametrize(
    "text",
    [
        "",
        ".",
        "abc",
        "abc.",
        ".abc",
        "a.b.c",
        "not base64!.abc",
        "e30.AAAA",  # {} with a short MAC
        "bnVsbA." + "A" * 43,  # null
        "W10." + "A" * 43,  # []
        "Zm9v." + "A" * 43,  # foo: not JSON
        "/w." + "A" * 43,  # 0xff: not UTF-8
        "W1tbW1tbW1tbW1tbW1tb" * 200,
        "A" * (MAX_TOKEN_CHARS + 1),
        "é.é",
    ],
)
def test_garbage_is_invalid(text: str) -> None:
    with pytest.raises(InvalidToken):
        tokens().verify(text, now=NOW)


def test_deeply_nested_payload_is_invalid_not_a_crash() -> None:
    payload = base64.urlsafe_b64encode(b"[" * 3000).rstrip(b"=").decode()
    with pytest.raises(InvalidToken):
        tokens().verify(f"{payload}.{'A' * 43}", now=NOW)


def test_oversized_token_is_refused_before_decoding() -> None:
    token = tokens().mint("run-1", "o" * MAX_TOKEN_CHARS, EXPIRES).token
    with pytest.raises(InvalidToken):
        tokens().verify(token, now=NOW)


def test_claims_with_wrong_shape_are_invalid_even_when_signed() -> None:
    # A payload signed with the right key but missing a claim is still not a token.
    payload = base64.urlsafe_b64encode(json.dumps({"kid": "k1", "wf": "run-1"}).encode())
    payload_text = payload.rstrip(b"=").decode()
    mac = hmac.new(OLD.encode(), payload_text.encode(), hashlib.sha256).digest()
    signature = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    with pytest.raises(InvalidToken):
        tokens().verify(f"{payload_text}.{signature}", now=NOW)


def test_nonce_hash_is_sha256_hex_and_never_the_nonce() -> None:
    nonce = tokens().verify(tokens().mint("run-1", "op_1", EXPIRES).token, now=NOW).nonce

    assert nonce_hash(nonce) == hashlib.sha256(nonce.encode()).hexdigest()
    assert nonce_hash(nonce) != nonce
    assert len(nonce_hash(nonce)) == 64


def test_keys_must_include_the_signing_key() -> None:
    with pytest.raises(ValueError):
        ResumeTokens({}, "k1")
    with pytest.raises(ValueError):
        ResumeTokens({"k1": OLD}, "k2")


def test_naive_expiry_is_refused() -> None:
    with pytest.raises(ValueError):
        tokens().mint("run-1", "op_1", datetime(2030, 1, 1))


def test_from_settings_uses_the_configured_keys() -> None:
    settings = Settings.from_env(
        {"WAITSTATE_TOKEN_KEYS": f"old:{OLD},new:{NEW}", "WAITSTATE_TOKEN_SIGNING_KEY": "new"}
    )
    from_settings = ResumeTokens.from_settings(settings)
    token = from_settings.mint("run-1", "op_1", EXPIRES).token

    assert from_settings.verify(token, now=NOW).key_id == "new"
    assert ResumeTokens({"new": NEW}, "new").verify(token, now=NOW).key_id == "new"
    with pytest.raises(ValueError):
        ResumeTokens.from_settings(Settings.from_env({}))


# --- thread tokens ---------------------------------------------------------------------------


def _resigned(token: str, secret: str, label: bytes, **changes: str) -> str:
    """`token` with its claims changed and signed again with `secret` over `label`."""
    text = _forged(token, **changes).split(".")[0]
    mac = hmac.new(secret.encode(), label + text.encode(), hashlib.sha256).digest()
    return f"{text}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def _assert_label_and_scope_are_signed(
    verify: Callable[..., object], token: str, kind: str, other_label: bytes
) -> None:
    """`token`'s claims signed under `other_label`, or under its `kind`'s own label with another
    scope, are refused by `verify`."""
    with pytest.raises(InvalidToken, match="signature"):
        verify(_resigned(token, OLD, other_label), now=NOW)
    own_label = f"waitstate {kind} token\x00".encode()
    with pytest.raises(InvalidToken, match=f"not a {kind} token"):
        verify(_resigned(token, OLD, own_label, scope="admin"), now=NOW)


def test_a_thread_token_round_trips_to_its_thread() -> None:
    token = tokens().mint_thread("thread-a", EXPIRES)

    assert tokens().verify_thread(token, now=NOW) == ThreadClaims(
        thread_id="thread-a", expires_at=EXPIRES, key_id="k1"
    )


def test_a_thread_token_is_never_a_resume_token_nor_the_reverse() -> None:
    thread = tokens().mint_thread("thread-a", EXPIRES)
    resume = tokens().mint("thread-a", "op_1", EXPIRES).token
    approval = tokens().mint("thread-a", approval_subject("apr_1"), EXPIRES).token

    with pytest.raises(InvalidToken, match="not a resume token"):
        tokens().verify(thread, now=NOW)
    for other in (resume, approval):
        with pytest.raises(InvalidToken, match="not a thread token"):
            tokens().verify_thread(other, now=NOW)


def test_thread_claims_signed_as_a_resume_token_are_not_a_thread_token() -> None:
    # The MAC covers the kind's label: the right claims under a resume token's MAC (no label),
    # or under another scope, are refused.
    token = tokens().mint_thread("thread-a", EXPIRES)

    _assert_label_and_scope_are_signed(tokens().verify_thread, token, "thread", b"")


def test_a_thread_token_for_another_thread_cannot_be_made_from_one() -> None:
    token = tokens().mint_thread("thread-a", EXPIRES)
    forged = _forged(token, thread="thread-b")

    with pytest.raises(InvalidToken, match="signature"):
        tokens().verify_thread(forged, now=NOW)


def test_thread_tokens_expire_and_rotate_with_the_keys() -> None:
    old = ResumeTokens({"old": OLD}, "old").mint_thread("thread-a", EXPIRES)
    rotated = ResumeTokens({"old": OLD, "new": NEW}, "new")

    assert rotated.verify_thread(old, now=NOW).key_id == "old"
    assert rotated.verify_thread(rotated.mint_thread("thread-a", EXPIRES), now=NOW).key_id == "new"
    with pytest.raises(InvalidToken, match="unknown key"):
        ResumeTokens({"new": NEW}, "new").verify_thread(old, now=NOW)
    with pytest.raises(ExpiredToken):
        rotated.verify_thread(old, now=EXPIRES)


@pytest.mark.parametrize("text", ["", "abc", "e30.AAAA", "A" * (MAX_TOKEN_CHARS + 1), "é.é"])
def test_garbage_is_no_thread_token(text: str) -> None:
    with pytest.raises(InvalidToken):
        tokens().verify_thread(text, now=NOW)


def test_a_thread_token_needs_an_aware_expiry_and_a_thread() -> None:
    with pytest.raises(ValueError):
        tokens().mint_thread("thread-a", datetime(2030, 1, 1))
    with pytest.raises(ValueError):
        tokens().mint_thread("", EXPIRES)


# --- view tokens -----------------------------------------------------------------------------


def test_a_view_token_round_trips_to_its_run() -> None:
    token = tokens().mint_view("run-a", EXPIRES)

    assert tokens().verify_view(token, now=NOW) == ViewClaims(
        run_id="run-a", expires_at=EXPIRES, key_id="k1"
    )


def test_a_view_token_is_no_other_kind_and_no_other_kind_is_one() -> None:
    view = tokens().mint_view("run-a", EXPIRES)
    others = [
        tokens().mint_thread("run-a", EXPIRES),
        tokens().mint("run-a", "op_1", EXPIRES).token,
        tokens().mint("run-a", approval_subject("apr_1"), EXPIRES).token,
    ]

    with pytest.raises(InvalidToken, match="not a resume token"):
        tokens().verify(view, now=NOW)
    with pytest.raises(InvalidToken, match="not a thread token"):
        tokens().verify_thread(view, now=NOW)
    for other in others:
        with pytest.raises(InvalidToken, match="not a view token"):
            tokens().verify_view(other, now=NOW)
    # Its claims under a thread token's label, or under another scope, are refused.
    _assert_label_and_scope_are_signed(
        tokens().verify_view, view, "view", b"waitstate thread token\x00"
    )


def test_a_view_token_for_another_run_cannot_be_made_from_one_and_it_expires() -> None:
    token = tokens().mint_view("run-a", EXPIRES)
    forged = _forged(token, run="run-b")

    with pytest.raises(InvalidToken, match="signature"):
        tokens().verify_view(forged, now=NOW)
    with pytest.raises(ExpiredToken):
        tokens().verify_view(token, now=EXPIRES)
    with pytest.raises(ValueError):
        tokens().mint_view("", EXPIRES)
    with pytest.raises(ValueError):
        tokens().mint_view("run-a", datetime(2030, 1, 1))


# --- operator sessions (the inbox's cookie) -------------------------------------------------


def test_a_session_names_its_operator_and_is_no_other_kind_of_token() -> None:
    session = tokens().mint_session("ops", EXPIRES)
    others = [tokens().mint_view("ops", EXPIRES), tokens().mint_thread("ops", EXPIRES)]

    assert tokens().verify_session(session, now=NOW) == "ops"
    with pytest.raises(ExpiredToken):
        tokens().verify_session(session, now=EXPIRES)
    for other in others:
        with pytest.raises(InvalidToken):
            tokens().verify_session(other, now=NOW)
    with pytest.raises(InvalidToken, match="not a view token"):
        tokens().verify_view(session, now=NOW)
    with pytest.raises(ValueError):
        tokens().mint_session("", EXPIRES)
