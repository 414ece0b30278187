"""The providers a worker's settings configure: each SDK's client built from its key or base URL,
with no retries of its own (Temporal's retry policy makes every attempt), and the apps' own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypedDict

from waitstate.providers import Provider, Providers, UnknownModelError
from waitstate.providers.scripted import Script, ScriptedProvider
from waitstate.settings import Settings

# OpenAI-compatible servers (vLLM, Ollama) usually ignore the key, but the SDK insists on one.
_PLACEHOLDER_KEY = "not-needed"


def build_providers(
    settings: Settings,
    extra: Mapping[str, Callable[[], Provider]] | None = None,
    scripts: Mapping[str, Script] | None = None,
) -> Providers:
    """Providers per the settings, and the apps' own (`extra`, and `scripts` for the scripted
    model); SDK clients never retry (Temporal's retry policy does)."""

    def make_openai() -> Provider:
        options = _sdk_options("openai", settings.openai_api_key, settings.openai_base_url)
        # Each SDK is imported on first use: Anthropic's alone holds ~45 MB of a worker's
        # memory and takes seconds to load (2.5 s), for workers that may never call it.
        # optional: openai, loaded by a worker whose models use it
        import openai

        from waitstate.providers.openai import OpenAIProvider

        return OpenAIProvider(openai.AsyncOpenAI(**options))

    def make_openai_responses() -> Provider:
        # The same key and server as `openai:`, over the Responses API (`/v1/responses`).
        options = _sdk_options("openai", settings.openai_api_key, settings.openai_base_url)
        # optional: openai, loaded by a worker whose models use it
        import openai

        from waitstate.providers.openai_responses import OpenAIResponsesProvider

        return OpenAIResponsesProvider(openai.AsyncOpenAI(**options))

    def make_anthropic() -> Provider:
        options = _sdk_options("anthropic", settings.anthropic_api_key, settings.anthropic_base_url)
        # optional: anthropic, loaded by a worker whose models use it
        import anthropic

        from waitstate.providers.anthropic import AnthropicProvider

        return AnthropicProvider(anthropic.AsyncAnthropic(**options))

    return Providers(
        {
            "openai": make_openai,
            "openai-responses": make_openai_responses,
            "anthropic": make_anthropic,
            "scripted": lambda: ScriptedProvider(scripts),
            **(extra or {}),
        }
    )


def warm_up(providers: Providers, settings: Settings) -> None:
    """Load the SDK of each provider the worker is configured for, and build its client, now
    rather than in its first call: a first call as slow as the next (the model queue's pace
    counts calls from their start, a provider from their arrival)."""
    for name, configured in (
        ("openai", settings.openai_api_key or settings.openai_base_url),
        ("anthropic", settings.anthropic_api_key or settings.anthropic_base_url),
    ):
        if configured:
            providers.resolve(f"{name}:warm-up")


class _SdkOptions(TypedDict):
    """The options both SDK clients are built with."""

    api_key: str
    base_url: str | None
    max_retries: int


def _sdk_options(name: str, api_key: str | None, base_url: str | None) -> _SdkOptions:
    """The client options of provider `name`'s SDK: its key (`<NAME>_API_KEY`), or a base URL
    whose server may take none; no retries of the SDK's own.

    Raises:
        UnknownModelError: neither the key nor a base URL is set.
    """
    if not (api_key or base_url):
        raise UnknownModelError(f"{name}: {name.upper()}_API_KEY is not set on the worker")
    return _SdkOptions(api_key=api_key or _PLACEHOLDER_KEY, base_url=base_url, max_retries=0)
