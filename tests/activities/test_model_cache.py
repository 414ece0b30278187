"""The model-call activity and the provider's prompt cache: one cache key per run (a digest of its
workflow id) for every call of the run, the cached tokens counted in the worker's metrics, and a
run whose next call after a short wait reads its prefix from the (stand-in's) cache."""

from __future__ import annotations

import itertools
import re
import time
from collections import defaultdict
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from tests.helpers import make_worker, start_run
from waitstate import Completion, Job, LongSpec, LongTool, StartContext, ToolSpec
from waitstate.activities import ModelActivities
from waitstate.activities.model import cache_key
from waitstate.blobs import LocalBlobStore
from waitstate.providers import Providers
from waitstate.schemas import Message, ModelCallInput, RunInput
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, openai_text
from waitstate.tools import ToolRegistry
from waitstate.worker import build_providers
from waitstate.workflows.agent_run import AgentRunWorkflow

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


class _NoArgs(BaseModel):
    pass


class _ShortJob(LongTool):
    """A job done `JOB_SECONDS` after it started: a short wait, polled every second."""

    async def start(self, args: _NoArgs, context: StartContext) -> Job:
        return Job(job_id=f"job-{time.time():.3f}")

    async def status(self, job_id: str) -> Completion:
        if time.time() - float(job_id.removeprefix("job-")) < JOB_SECONDS:
            return Completion(status="running")
        return Completion(status="succeeded", result={"rows": 412})

    async def cancel(self, job_id: str) -> None:
        pass


JOB_SECONDS = 2.0
SHORT_JOB = ToolSpec(
    name="short_job",
    description="Run a short job.",
    args=_NoArgs,
    long=LongSpec(
        backend=_ShortJob(),
        completion="poll",
        poll_interval=timedelta(seconds=1),
        timeout=timedelta(minutes=1),
    ),
)


async def test_after_a_short_wait_the_next_call_reads_its_prefix_from_the_cache(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # A wait shorter than rebuild_after keeps the transcript: the call after it sends the
    # conversation so far unchanged, with the job's outcome after it, and the provider's cache
    # serves all of what the call before it sent. (After a long one the context is rebuilt from
    # the ledger; by then the provider's cache, 5 minutes, has lapsed anyway.)
    with WireServer(prompt_cache=True) as wire:
        settings = Settings(
            anthropic_base_url=wire.anthropic_base_url, anthropic_api_key="test-key"
        )
        async with make_worker(dev_env.client, task_queue, tools=[SHORT_JOB], settings=settings):
            handle = await start_run(
                dev_env.client,
                task_queue,
                RunInput(
                    task="Run the job, then say how many rows it made.",
                    model="anthropic:test-model",
                    tools=["short_job"],
                ),
            )
            result = await handle.result()
            state = await handle.query(AgentRunWorkflow.status)
        assert wire.prompt_cache is not None
        uses = list(wire.prompt_cache.uses)

    assert result.status == "completed"
    assert state.context_rebuilds == 0
    [kept] = [step.detail for step in state.steps if "transcript kept" in step.detail]
    assert re.fullmatch(r"transcript kept after waiting [0-9.]+ s", kept), kept  # not 0:00:02.28
    # Every call after the first reads the whole of the call before it back from the cache.
    assert len(uses) >= 2, uses
    for before, after in itertools.pairwise(uses):
        assert after.read == before.total > 0
    assert result.usage.cached_input_tokens == sum(use.read for use in uses)
