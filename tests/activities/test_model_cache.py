"""The model-call activity and the provider's prompt cache: one cache key per run (a digest of its
workflow id) for every call of the run, and the cached tokens counted in the worker's metrics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities import ModelActivities
from activities.model import cache_key
from waitstate.blobs import LocalBlobStore
from waitstate.providers import Providers
from waitstate.schemas import Message, ModelCallInput
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, openai_text
from waitstate.tools import ToolRegistry
from worker import build_providers

HELLO = ModelCallInput(
    model="openai:test-model",
    system_prompt="",
    new_messages=[Message(role="user", content="hello")],
    tools=[],
)


def _providers(wire: WireServer) -> Providers:
    return build_providers(
        Settings(
            openai_base_url=wire.openai_base_url,
            anthropic_base_url=wire.anthropic_base_url,
            openai_api_key="test-key",
            anthropic_api_key="test-key",
        )
    )


class _Meter:
    """Counts what the activity adds to its counters, by name and labels (a stand-in for the
    worker's meter: the activity only creates counters and adds to them)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, frozenset[tuple[str, str]]], int] = defaultdict(int)

    def with_additional_attributes(self, _: Mapping[str, str]) -> _Meter:
        return self

    def create_counter(self, name: str, *_: Any, **__: Any) -> _Counter:
        return _Counter(self, name)


class _Counter:
    def __init__(self, meter: _Meter, name: str) -> None:
        self._meter, self._name = meter, name

    def add(self, value: int, labels: Mapping[str, str]) -> None:
        self._meter.counts[(self._name, frozenset(labels.items()))] += value


async def test_every_call_of_a_run_has_the_runs_cache_key(wire: WireServer, tmp_path: Path) -> None:
    providers = _providers(wire)
    activities = ModelActivities(providers, ToolRegistry([]), LocalBlobStore(tmp_path))
    env = ActivityEnvironment()
    try:
        first = await env.run(activities.call_model, HELLO)
        more = {"transcript_ref": first.transcript_ref, "new_messages": [HELLO.new_messages[0]]}
        await env.run(activities.call_model, HELLO.model_copy(update=more))
    finally:
        await providers.aclose()

    keys = [request.body["prompt_cache_key"] for request in wire.requests]
    assert keys == [cache_key(env.info.workflow_id)] * 2
    # A digest: the run's id, which may name a customer, does not leave for the provider.
    assert env.info.workflow_id not in keys[0] and len(keys[0]) <= 64
    assert cache_key("another-run") != keys[0]


async def test_cached_tokens_are_counted_in_the_metrics(wire: WireServer, tmp_path: Path) -> None:
    wire.enqueue(openai_text("hi", input_tokens=1500, cached_tokens=1024))
    providers = _providers(wire)
    activities = ModelActivities(providers, ToolRegistry([]), LocalBlobStore(tmp_path))
    env = ActivityEnvironment()
    meter = _Meter()
    env.metric_meter = meter  # type: ignore[assignment]
    try:
        response = await env.run(activities.call_model, HELLO)
    finally:
        await providers.aclose()

    assert response.usage.cached_input_tokens == 1024
    labels = {"provider": "openai"}
    tokens = "waitstate_model_tokens"
    assert meter.counts[(tokens, frozenset({**labels, "direction": "input"}.items()))] == 1500
    cache = "waitstate_model_cache_tokens"
    assert meter.counts[(cache, frozenset({**labels, "kind": "read"}.items()))] == 1024
    assert meter.counts[(cache, frozenset({**labels, "kind": "write"}.items()))] == 0
