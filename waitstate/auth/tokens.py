"""Resume tokens: what an external system presents to the gateway to complete one operation,
and what an approval link carries to decide one request (its subject: `approval_subject`);
thread tokens: what a person's client presents to talk in one thread; and view tokens: what a
run's view link carries to follow its events, and nothing else; and publish tokens: what a
worker presents to hand a run's readers its model's text as it is written (its deltas).

A token is `base64url(canonical JSON claims) + "." + base64url(HMAC-SHA256(secret, payload))`.
A resume token's claims are the run, the operation, a nonce, the expiry and the id of the key
that signed it, so keys can rotate: the gateway accepts every configured key and signs with one.
A thread token's are the thread, its scope (`thread`), the expiry and the key id, and its MAC
covers a label before the payload: the two kinds share the keys, but neither is ever taken for
the other (their claims differ, and so would their MACs over the same payload). A view token
is a thread token's kind with the run for the thread, its scope `view`, and a label of its own;
a publish token is a view token's kind with its scope `publish` and a label of its own.

Stdlib only: activities mint tokens, the gateway verifies them, and neither needs more.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from waitstate.schemas.approvals import DecisionKind
    from waitstate.settings import Settings

# A token travels in an Authorization header; anything longer is not one of ours, and is
# refused before it is decoded.
MAX_TOKEN_CHARS = 4096
NONCE_CHARS = 22  # 132 bits of the HMAC, base64url

_MAC_BYTES = hashlib.sha256().digest_size
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_CLAIM_NAMES = frozenset({"wf", "op", "nonce", "exp", "kid"})
THREAD_SCOPE = "thread"
# What a thread token's MAC covers before its payload (which is base64url, so has no NUL).
_THREAD_LABEL = b"waitstate thread token\x00"
VIEW_SCOPE = "view"
_VIEW_LABEL = b"waitstate view token\x00"
PUBLISH_SCOPE = "publish"
_PUBLISH_LABEL = b"waitstate publish token\x00"
SESSION_SCOPE = "inbox"
# A moment before any token's expiry: what `signed_claims` checks a token at.
_NEVER = datetime.min.replace(tzinfo=UTC)
_SESSION_LABEL = b"waitstate operator session\x00"


@dataclass(frozen=True)
class _Scoped:
    """A token kind that names one thing (a thread, a run, an operator) for one scope: its
    claim's name, its scope, the label its MAC covers, and what it is called in errors."""

    claim: str
    scope: str
    label: bytes
    kind: str
    names: str  # what the claim names, for the error of minting one for nothing

    @property
    def claim_names(self) -> frozenset[str]:
        return frozenset({self.claim, "scope", "exp", "kid"})


_THREAD = _Scoped("thread", THREAD_SCOPE, _THREAD_LABEL, "thread token", "thread")
_VIEW = _Scoped("run", VIEW_SCOPE, _VIEW_LABEL, "view token", "run")
_PUBLISH = _Scoped("run", PUBLISH_SCOPE, _PUBLISH_LABEL, "publish token", "run")
_SESSION = _Scoped("operator", SESSION_SCOPE, _SESSION_LABEL, "session", "operator")


@dataclass(frozen=True)
class ResumeClaims:
    """What a verified token says: which operation of which run it may complete, until when."""

    workflow_id: str
    operation_id: str
    nonce: str
    expires_at: datetime
    key_id: str


@dataclass(frozen=True, kw_only=True)
class ScopedClaims:
    """What every verified scoped token (thread, view, publish) says besides what it names:
    until when it is valid, and the id of the key that signed it."""

    expires_at: datetime
    key_id: str


@dataclass(frozen=True)
class ThreadClaims(ScopedClaims):
    """What a verified thread token says: which thread it may talk in, until when."""

    thread_id: str


@dataclass(frozen=True)
class ViewClaims(ScopedClaims):
    """What a verified view token says: which run's events it may read, until when."""

    run_id: str


@dataclass(frozen=True)
class PublishClaims(ScopedClaims):
    """What a verified publish token says: which run's model text it may hand the gateway."""

    run_id: str


@dataclass(frozen=True)
class MintedToken:
    """A fresh token and its nonce's hash: the token goes to the external system, the hash to
    the workflow (the token itself is never written to history)."""

    token: str
    nonce_hash: str


class InvalidToken(Exception):
    """The token is malformed, signed with an unknown key, its signature does not match, or it
    is a token of the other kind (a resume token where a thread token is due, or the reverse)."""


class ExpiredToken(Exception):
    """The token's signature is valid but its `expires_at` has passed."""


def nonce_hash(nonce: str) -> str:
    """The SHA-256 hex digest of a nonce: what the workflow keeps to check an Update's nonce."""
    return hashlib.sha256(nonce.encode()).hexdigest()


def approval_subject(request_id: str, decision: DecisionKind | None = None) -> str:
    """The `operation_id` claim of the token in an approval request's links.

    The slash keeps the two kinds of token apart: an operation id is one path segment of
    `/v1/operations/{operation_id}/complete`, so it never equals an approval subject, and a
    token issued for either endpoint is refused by the other. A token for one `decision`
    (a one-click approve link) allows that decision only.
    """
    return f"approval/{request_id}" if decision is None else f"approval/{request_id}/{decision}"


def question_subject(question_id: str) -> str:
    """The `operation_id` claim of the token in an operation's question's link (kept apart from
    operation and approval tokens the same way)."""
    return f"question/{question_id}"


class ResumeTokens:
    """Mints and verifies resume tokens and thread tokens with a set of keys (key id -> secret).

    The scoped tokens (thread, view and publish tokens, and operator sessions) each name one
    thing, and fail alike: a `mint_*` raises ValueError if `expires_at` is naive or the thing
    it names is empty; a `verify_*` raises InvalidToken if the token is malformed, names an
    unknown key id, has a bad signature or is a token of another kind (a resume token among
    them), and ExpiredToken if the signature is valid but `now` (default: the current time) is
    at or past its `expires_at`.
    """

    def __init__(self, keys: Mapping[str, str], signing_key_id: str) -> None:
        """Accept tokens signed by any of `keys`; sign new ones with `signing_key_id`.

        Raises:
            ValueError: `keys` is empty or does not contain `signing_key_id`.
        """
        if not keys:
            raise ValueError("no resume-token keys configured (WAITSTATE_TOKEN_KEYS)")
        if signing_key_id not in keys:
            raise ValueError(f"signing key {signing_key_id!r} is not among the token keys")
        self._keys = {key_id: secret.encode() for key_id, secret in keys.items()}
        self._signing_key_id = signing_key_id

    @classmethod
    def from_settings(cls, settings: Settings) -> ResumeTokens:
        """The keys of `WAITSTATE_TOKEN_KEYS`, signing with `WAITSTATE_TOKEN_SIGNING_KEY`.

        Raises:
            ValueError: no keys are configured, or the signing key is not among them.
        """
        if not settings.token_keys or settings.token_signing_key is None:
            raise ValueError("no resume-token keys configured (WAITSTATE_TOKEN_KEYS)")
        return cls(settings.token_keys, settings.token_signing_key)

    def mint(
        self,
        workflow_id: str,
        operation_id: str,
        expires_at: datetime,
        *,
        nonce: str | None = None,
    ) -> MintedToken:
        """A token for one operation of one run, valid until `expires_at` (timezone-aware).

        Minting twice with the same arguments and signing key gives the same token.

        Args:
            workflow_id: The run the token may resume.
            operation_id: The operation (or approval subject) it may complete.
            expires_at: When it stops being valid.
            nonce: The nonce the run chose for this operation, so every token minted for it
                carries the same one whichever key signs it (keys rotate; the run keeps its
                hash). Without it (runs started before runs chose their nonces), the nonce is
                derived from the signing key.

        Raises:
            ValueError: `expires_at` is naive, or `nonce` is not 16-64 base64url characters.
        """
        if expires_at.tzinfo is None:
            raise ValueError("expires_at must be timezone-aware")
        key_id = self._signing_key_id
        secret = self._keys[key_id]
        if nonce is None:
            # Deterministic, not random: a start activity retried after the external system
            # accepted the job mints again, and the system keeps the first token it was given.
            nonce_input = f"nonce\x00{workflow_id}\x00{operation_id}".encode()
            nonce = _b64encode(_mac(secret, nonce_input))[:NONCE_CHARS]
        elif not (16 <= len(nonce) <= 64 and _BASE64URL.fullmatch(nonce)):
            raise ValueError("a nonce is 16-64 base64url characters")
        claims = {
            "wf": workflow_id,
            "op": operation_id,
            "nonce": nonce,
            "exp": expires_at.astimezone(UTC).isoformat(),
            "kid": key_id,
        }
        return MintedToken(token=self._sign(claims, b""), nonce_hash=nonce_hash(nonce))

    def verify(self, token: str, now: datetime | None = None) -> ResumeClaims:
        """The claims of a resume token this gateway's keys signed and that has not expired.

        Raises:
            InvalidToken: malformed, unknown key id, bad signature, or not a resume token (a
                thread token among them).
            ExpiredToken: the signature is valid but `now` (timezone-aware; default: the
                current time) is at or past `expires_at`.
        """
        return _resume_claims(*self._open(token, _CLAIM_NAMES, b"", "resume token", now))

    def signed_claims(self, token: str) -> ResumeClaims:
        """The claims of a resume token this gateway's keys signed, whether or not it has
        expired: what a request with an expired token may still learn about (what became of
        its own earlier delivery). Never a reason to apply anything.

        Raises:
            InvalidToken: as `verify`.
        """
        return _resume_claims(*self._open(token, _CLAIM_NAMES, b"", "resume token", _NEVER))

    def mint_thread(self, thread_id: str, expires_at: datetime) -> str:
        """A thread token: it allows posting messages to the thread `thread_id` and reading
        them, and nothing else, until `expires_at` (timezone-aware); fails as the class says."""
        return self._mint_scoped(_THREAD, thread_id, expires_at)

    def verify_thread(self, token: str, now: datetime | None = None) -> ThreadClaims:
        """The claims of an unexpired thread token of these keys; fails as the class says."""
        thread_id, expires_at, key_id = self._open_scoped(_THREAD, token, now)
        return ThreadClaims(thread_id=thread_id, expires_at=expires_at, key_id=key_id)

    def mint_view(self, run_id: str, expires_at: datetime) -> str:
        """A view token: it allows reading the events of the run `run_id` (and of the runs it
        continues as), and nothing else, until `expires_at` (timezone-aware). It may travel in
        a link's query string, as a browser's event stream cannot send a header. Fails as the
        class says."""
        return self._mint_scoped(_VIEW, run_id, expires_at)

    def verify_view(self, token: str, now: datetime | None = None) -> ViewClaims:
        """The claims of an unexpired view token of these keys; fails as the class says."""
        run_id, expires_at, key_id = self._open_scoped(_VIEW, token, now)
        return ViewClaims(run_id=run_id, expires_at=expires_at, key_id=key_id)

    def mint_publish(self, run_id: str, expires_at: datetime) -> str:
        """A publish token: it allows handing the gateway the model's text of the run `run_id`
        as it is written (`POST /v1/runs/{run_id}/deltas`), and nothing else, until
        `expires_at` (timezone-aware). Workers mint it per model call; it never enters a run's
        history. Fails as the class says."""
        return self._mint_scoped(_PUBLISH, run_id, expires_at)

    def verify_publish(self, token: str, now: datetime | None = None) -> PublishClaims:
        """The claims of an unexpired publish token of these keys; fails as the class says."""
        run_id, expires_at, key_id = self._open_scoped(_PUBLISH, token, now)
        return PublishClaims(run_id=run_id, expires_at=expires_at, key_id=key_id)

    def mint_session(self, operator: str, expires_at: datetime) -> str:
        """An operator's inbox session: what the inbox page's cookie holds once an operator
        signed in with their key (`operator` is the key's id, never the key), until
        `expires_at` (timezone-aware); fails as the class says."""
        return self._mint_scoped(_SESSION, operator, expires_at)

    def verify_session(self, token: str, now: datetime | None = None) -> str:
        """The operator (key id) of an unexpired inbox session of these keys; fails as the class
        says."""
        operator, _, _ = self._open_scoped(_SESSION, token, now)
        return operator

    def _mint_scoped(self, scoped: _Scoped, subject: str, expires_at: datetime) -> str:
        """A token of the kind `scoped` for `subject`, until `expires_at`.

        Raises:
            ValueError: `expires_at` is naive, or `subject` is empty.
        """
        if expires_at.tzinfo is None:
            raise ValueError("expires_at must be timezone-aware")
        if not subject:
            raise ValueError(f"a {scoped.kind} names a {scoped.names}")
        claims = {
            scoped.claim: subject,
            "scope": scoped.scope,
            "exp": expires_at.astimezone(UTC).isoformat(),
            "kid": self._signing_key_id,
        }
        return self._sign(claims, scoped.label)

    def _open_scoped(
        self, scoped: _Scoped, token: str, now: datetime | None
    ) -> tuple[str, datetime, str]:
        """The subject, expiry and key id of a token of the kind `scoped`.

        Raises:
            InvalidToken: not a valid token of that kind.
            ExpiredToken: it has expired.
        """
        claims, expires_at = self._open(token, scoped.claim_names, scoped.label, scoped.kind, now)
        if claims["scope"] != scoped.scope or not claims[scoped.claim]:
            raise InvalidToken(f"not a {scoped.kind}")
        return claims[scoped.claim], expires_at, claims["kid"]

    def _sign(self, claims: Mapping[str, str], label: bytes) -> str:
        secret = self._keys[self._signing_key_id]
        payload = _b64encode(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode())
        signature = _b64encode(_mac(secret, label + payload.encode()))
        return f"{payload}.{signature}"

    def _open(
        self,
        token: str,
        names: frozenset[str],
        label: bytes,
        kind: str,
        now: datetime | None,
    ) -> tuple[dict[str, str], datetime]:
        """The claims (exactly `names`, every one a string) of a token of `kind` whose MAC
        covers `label` and its payload, and its expiry (UTC), once checked.

        Raises:
            InvalidToken: malformed, other claims, unknown key id, or bad signature.
            ExpiredToken: valid, but `now` (default: the current time) is at or past its expiry.
        """
        if not token or len(token) > MAX_TOKEN_CHARS:
            raise InvalidToken(f"not a {kind}")
        payload, dot, signature = token.partition(".")
        if not dot or not _BASE64URL.fullmatch(payload) or not _BASE64URL.fullmatch(signature):
            raise InvalidToken(f"not a {kind}")
        try:
            claims = json.loads(_b64decode(payload))
            mac = _b64decode(signature)
        except (ValueError, binascii.Error, RecursionError) as err:
            # The payload is parsed before its signature is checked (it names the key), so
            # this is attacker-controlled text: anything odd is simply not a token.
            raise InvalidToken(f"not a {kind}") from err
        if (
            not isinstance(claims, dict)
            or claims.keys() != names
            or not all(isinstance(value, str) for value in claims.values())
            or len(mac) != _MAC_BYTES
        ):
            raise InvalidToken(f"not a {kind}")
        secret = self._keys.get(claims["kid"])
        if secret is None:
            raise InvalidToken("the token was signed with an unknown key")
        if not hmac.compare_digest(mac, _mac(secret, label + payload.encode())):
            raise InvalidToken("bad token signature")
        try:
            expires_at = datetime.fromisoformat(claims["exp"])
        except ValueError as err:
            raise InvalidToken(f"not a {kind}") from err
        if expires_at.tzinfo is None:
            raise InvalidToken(f"not a {kind}")
        if now is None:
            now = datetime.now(UTC)
        if now >= expires_at:
            raise ExpiredToken(f"the token expired at {expires_at.isoformat()}")
        return claims, expires_at.astimezone(UTC)


def _resume_claims(claims: Mapping[str, str], expires_at: datetime) -> ResumeClaims:
    return ResumeClaims(
        workflow_id=claims["wf"],
        operation_id=claims["op"],
        nonce=claims["nonce"],
        expires_at=expires_at,
        key_id=claims["kid"],
    )


def _mac(secret: bytes, message: bytes) -> bytes:
    return hmac.new(secret, message, hashlib.sha256).digest()


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    """The bytes `text` encodes, if it is their one encoding: a last character whose unused
    low bits are set (`...B` for `...A`) decodes to the same bytes, and would make a second
    string of one token.

    Raises:
        ValueError: `text` is not the canonical base64url of any bytes.
    """
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64encode(data) != text:
        raise ValueError("not canonical base64url")
    return data
