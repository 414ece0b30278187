"""Operator keys: what a request presents to the gateway to start a thread (`POST /v1/threads`).

An operator key is a shared secret of the operator's own (WAITSTATE_OPERATOR_KEYS, `kid:secret`,
32+ characters, several at once so they can rotate): it is not a token, names no thread, and
never expires. Every configured key allows the same; the key id is only what the log says
started a thread. No key configured: nothing may start a thread over HTTP.

Stdlib only, as the tokens are.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from waitstate.auth.tokens import MAX_TOKEN_CHARS


class OperatorKeys:
    """Checks a presented operator key against the configured ones (key id -> secret)."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        # Digests, compared in constant time: equal lengths, so the comparison says nothing
        # of a secret's length, and no secret is kept in the clear.
        self._digests = {key_id: _digest(secret) for key_id, secret in keys.items()}

    @property
    def configured(self) -> bool:
        """Whether any key is configured (none: no thread may be started)."""
        return bool(self._digests)

    def identify(self, presented: str) -> str | None:
        """The id of the configured key `presented` is, or None if it is none of them."""
        if not presented or len(presented) > MAX_TOKEN_CHARS:
            return None
        digest = _digest(presented)
        found = None
        for key_id, expected in self._digests.items():
            # Every key is compared, whichever matches: the time taken says nothing of which.
            if hmac.compare_digest(digest, expected) and found is None:
                found = key_id
        return found


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()
