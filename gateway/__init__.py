"""The webhook gateway: verifies resume tokens and delivers completions and decisions to runs.

python -m gateway       # serves on GATEWAY_HOST:GATEWAY_PORT, keys from WAITSTATE_TOKEN_KEYS
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gateway.tokens import (
    ExpiredToken,
    InvalidToken,
    MintedToken,
    ResumeClaims,
    ResumeTokens,
    nonce_hash,
)

if TYPE_CHECKING:
    from gateway.app import create_app
    from gateway.delivery import (
        Deliverer,
        DeliveryRefused,
        TemporalDeliverer,
        approval_subject,
    )

__all__ = [
    "Deliverer",
    "DeliveryRefused",
    "ExpiredToken",
    "InvalidToken",
    "MintedToken",
    "ResumeClaims",
    "ResumeTokens",
    "TemporalDeliverer",
    "approval_subject",
    "create_app",
    "nonce_hash",
]

# Workers import `gateway.tokens` to mint tokens; importing the HTTP app (FastAPI) and the
# Temporal client with it would add half a second to every worker start for nothing, so the
# app and delivery names load on first use (PEP 562).
_LAZY = {
    "create_app": "gateway.app",
    "Deliverer": "gateway.delivery",
    "DeliveryRefused": "gateway.delivery",
    "TemporalDeliverer": "gateway.delivery",
    "approval_subject": "gateway.delivery",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
