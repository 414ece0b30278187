"""The tokens a run handed out, minted again from the fleet's keys, for the suite to use as the
external system would (a late completion, a replay).

Minting is deterministic: the same run, operation, nonce, expiry and key give the same token.
The nonce is the run's choice, recorded in the start activity's input; runs started before runs
chose their nonces derive it from the signing key instead, so each key is tried, and the one
whose nonce hash is the one the run keeps is the token the job holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chaos.history import operation_nonce
from waitstate.auth.tokens import ResumeTokens
from waitstate.schemas.operations import Operation


def job_token(
    keys: Mapping[str, str], workflow_id: str, op: Operation, chain: list[list[Any]]
) -> str | None:
    """The token the operation's job was given (None: no key gives the run's nonce hash)."""
    nonce = operation_nonce(chain, op.operation_id)
    for key_id in keys:
        minted = ResumeTokens(keys, key_id).mint(
            workflow_id, op.operation_id, op.expires_at, nonce=nonce
        )
        if minted.nonce_hash == op.nonce_hash:
            return minted.token
    return None
