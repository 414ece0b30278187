"""Operator keys: what may start a thread, checked in constant time."""

from __future__ import annotations

import pytest

from waitstate.auth.operators import OperatorKeys
from waitstate.auth.tokens import MAX_TOKEN_CHARS

OPS = "ops-key-0123456789abcdef0123456789abcdef"
CI = "ci-key-0123456789abcdef0123456789abcdef0"


def test_a_configured_key_is_known_by_its_id() -> None:
    keys = OperatorKeys({"ops": OPS, "ci": CI})

    assert keys.configured
    assert (keys.identify(OPS), keys.identify(CI)) == ("ops", "ci")


@pytest.mark.parametrize(
    "presented",
    ["", OPS[:-1], OPS + "x", OPS.upper(), f" {OPS}", "ops", "x" * (MAX_TOKEN_CHARS + 1)],
)
def test_anything_else_is_no_key(presented: str) -> None:
    assert OperatorKeys({"ops": OPS, "ci": CI}).identify(presented) is None


def test_no_keys_allow_nothing() -> None:
    keys = OperatorKeys({})

    assert not keys.configured
    assert keys.identify(OPS) is None
    assert keys.identify("") is None
