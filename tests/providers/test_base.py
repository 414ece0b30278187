"""The provider protocol's helpers: retry hints, model specs and retryability."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from waitstate.providers.base import (
    MESSAGE_CHARS,
    ProviderError,
    no_response_message,
    parse_model_spec,
    retry_after_seconds,
)

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"Retry-After": "2.5"}, 2.5),
        ({"retry-after": "-4"}, 0.0),
        ({"retry-after-ms": "1500"}, 1.5),
        # The finer-grained header wins when a provider sends both.
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        # An unreadable ms value falls back to the seconds header.
        ({"retry-after-ms": "soon", "retry-after": "2"}, 2.0),
        ({"retry-after": format_datetime(NOW + timedelta(seconds=30), usegmt=True)}, 30.0),
        ({"retry-after": format_datetime(NOW - timedelta(seconds=30), usegmt=True)}, 0.0),
        ({"retry-after": "whenever"}, None),
        ({"retry-after": ""}, None),
        ({}, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers, now=NOW) == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("openai:gpt-4.1", ("openai", "gpt-4.1")),
        ("anthropic:claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5")),
        # Only the first colon separates: model names may contain colons.
        ("openai:ft:gpt-4.1:acme::abc123", ("openai", "ft:gpt-4.1:acme::abc123")),
    ],
)
def test_parse_model_spec(spec: str, expected: tuple[str, str]) -> None:
    assert parse_model_spec(spec) == expected


@pytest.mark.parametrize(
    "spec", ["gpt-4.1", ":gpt-4.1", "openai:", ":", "", "anthropic: ", "anthropic:\t", " :x"]
)
def test_parse_model_spec_rejects_malformed(spec: str) -> None:
    with pytest.raises(ValueError, match="is not provider:model"):
        parse_model_spec(spec)


@pytest.mark.parametrize("spec", ["anthropic: claude-sonnet-4-5", "openai:gpt-4.1 ", " openai:x"])
def test_parse_model_spec_rejects_spaces_around_names(spec: str) -> None:
    with pytest.raises(ValueError, match="has spaces around"):
        parse_model_spec(spec)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_request_errors_are_not_retryable(status: int) -> None:
    assert ProviderError("openai", "no", status=status).retryable is False


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503, None])
def test_transient_errors_are_retryable(status: int | None) -> None:
    assert ProviderError("openai", "later", status=status).retryable is True


def test_provider_error_message_names_provider_and_status() -> None:
    assert str(ProviderError("anthropic", "overloaded", status=529)) == (
        "anthropic: HTTP 529: overloaded"
    )
    assert str(ProviderError("openai", "the SDK's words")) == (
        "openai: no response: the SDK's words"
    )


def test_provider_message_is_one_bounded_line() -> None:
    body = "Traceback (most recent call last):\n" + "  frame\n" * 5000

    err = ProviderError("openai", body, status=502)

    text = str(err)
    assert text.startswith("openai: HTTP 502: Traceback (most recent call last): frame frame")
    assert "\n" not in text
    assert len(text) == len("openai: HTTP 502: ") + MESSAGE_CHARS
    assert text.endswith("…")


def test_no_response_message_says_why_and_where_without_the_query() -> None:
    cause = ConnectionRefusedError("the transport's reason")

    message = no_response_message(
        "The SDK's words.", cause, "http://10.0.0.7:8000/v1/chat/completions?api-version=1"
    )

    assert message == (
        "The SDK's words. the transport's reason (http://10.0.0.7:8000/v1/chat/completions)"
    )
    assert no_response_message("The SDK's words.", None, "http://h/v1") == (
        "The SDK's words. (http://h/v1)"
    )
