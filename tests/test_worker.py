"""build_providers: which providers a worker can create from its settings."""

from __future__ import annotations

import pytest

from waitstate.providers import UnknownModelError
from waitstate.providers.anthropic import AnthropicProvider
from waitstate.providers.openai import OpenAIProvider
from waitstate.providers.scripted import ScriptedProvider
from waitstate.settings import Settings
from worker import build_providers


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("openai:gpt-4.1", "OPENAI_API_KEY"), ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY")],
)
def test_provider_without_key_or_base_url_is_unknown(spec: str, variable: str) -> None:
    providers = build_providers(Settings.from_env({}))

    with pytest.raises(UnknownModelError, match=f"{variable} is not set on the worker"):
        providers.resolve(spec)


@pytest.mark.parametrize(
    ("env", "spec", "kind"),
    [
        ({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, "openai:llama", OpenAIProvider),
        ({"OPENAI_API_KEY": "sk-test"}, "openai:gpt-4.1", OpenAIProvider),
        ({"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}, "anthropic:claude", AnthropicProvider),
        ({"ANTHROPIC_API_KEY": "sk-ant-test"}, "anthropic:claude", AnthropicProvider),
        ({}, "scripted:demo", ScriptedProvider),
    ],
)
def test_configured_provider_resolves(env: dict[str, str], spec: str, kind: type) -> None:
    # Port 1 refuses connections: building a provider must not touch the network.
    provider, model = build_providers(Settings.from_env(env)).resolve(spec)

    assert isinstance(provider, kind)
    assert model == spec.partition(":")[2]
