"""The webhook gateway: verifies resume tokens and delivers completions and decisions to runs,
and takes people's messages to threads.

python -m waitstate.gateway       # serves on GATEWAY_HOST:GATEWAY_PORT, keys from WAITSTATE_TOKEN_KEYS

The package exports the tokens only (stdlib, what workers import to mint them); the HTTP app
and the deliverer are imported from `waitstate.gateway.app` and `waitstate.gateway.delivery`.
"""

from waitstate.gateway.tokens import (
    ExpiredToken,
    InvalidToken,
    MintedToken,
    ResumeClaims,
    ResumeTokens,
    ThreadClaims,
    approval_subject,
    nonce_hash,
)

__all__ = [
    "ExpiredToken",
    "InvalidToken",
    "MintedToken",
    "ResumeClaims",
    "ResumeTokens",
    "ThreadClaims",
    "approval_subject",
    "nonce_hash",
]
