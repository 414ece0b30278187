"""What the gateway and the server around it may log: nothing shaped like a resume token or a
piece of one, and no query string's values (`?token=...`)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from tests.rigs import GATEWAY_SECRET
from waitstate.auth.tokens import ResumeTokens
from waitstate.gateway.redaction import REDACTED, RedactTokens, redact

TOKEN = (
    ResumeTokens({"k1": GATEWAY_SECRET}, "k1")
    .mint("run-1", "op_1", datetime.now(UTC) + timedelta(hours=1))
    .token
)
CLAIMS, SIGNATURE = TOKEN.split(".")


def test_a_token_and_its_pieces_are_redacted() -> None:
    for text in (TOKEN, f"Bearer {TOKEN}", CLAIMS, SIGNATURE, CLAIMS[:12]):
        assert REDACTED in redact(text), text
        assert CLAIMS[:8] not in redact(text) and SIGNATURE[:40] not in redact(text)


def test_query_values_are_redacted_and_ids_kept() -> None:
    assert redact("/v1/operations/op_1/complete?token=abc&x=1") == (
        f"/v1/operations/op_1/complete?token={REDACTED}&x={REDACTED}"
    )
    request_id = "3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b"
    assert redact(f"refused POST '/v1/approvals/{request_id}/decision'") == (
        f"refused POST '/v1/approvals/{request_id}/decision'"
    )


def test_the_filter_drops_a_paths_query_string_whole() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "POST", f"/v1/operations/op_1/complete?{TOKEN}", "1.1", 200),
        None,
    )

    assert RedactTokens().filter(record)

    assert record.getMessage() == (
        f'127.0.0.1:5000 - "POST /v1/operations/op_1/complete?{REDACTED} HTTP/1.1" 200'
    )
