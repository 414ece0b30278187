"""The model-call activity: provider failures reach Temporal as one short line with no chained
causes (so Temporal keeps them whole), and a model that hangs is cut off before the model
timeout with an error that names the provider and the limit. Real SDK clients over HTTP."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.failure.v1 import Failure
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from tests.helpers import eventually, make_worker, provider_error, start_run
from waitstate import Agent
from waitstate.activities import ModelActivities
from waitstate.activities.model import FAILURE_CHARS
from waitstate.blobs import LocalBlobStore
from waitstate.converter import DATA_CONVERTER
from waitstate.providers import Providers
from waitstate.providers.base import ModelSettings
from waitstate.schemas import (
    Message,
    ModelCallInput,
    ModelResponse,
    RunInput,
    ToolDefinition,
    Usage,
)
from waitstate.schemas.errors import MODEL_SPEC_INVALID, MODEL_UNAVAILABLE
from waitstate.settings import Settings
from waitstate.testing.wire_server import (
    WireServer,
    delayed,
    error,
    openai_text,
    responses_function_calls,
    responses_text,
)
from waitstate.tools import ToolRegistry
from waitstate.worker import build_providers

# Temporal keeps a retrying activity's last failure whole up to 4 KB and warns past 2 KB
# (limit.mutableStateActivityFailureSize.error / .warn); these failures stay under the warning.
FAILURE_BYTES = 2048
HELLO = ModelCallInput(
    model="openai:test-model",
    system_prompt="",
    new_messages=[Message(role="user", content="hello")],
    tools=[],
    turn=1,
)


def _settings(base_url: str) -> Settings:
    return Settings(openai_base_url=base_url, openai_api_key="test-key")


def _openai(base_url: str) -> Providers:
    return build_providers(_settings(base_url))


async def _failure(
    providers: Providers,
    blob_dir: Path,
    call: ModelCallInput = HELLO,
    *,
    start_to_close: timedelta = timedelta(seconds=30),
) -> tuple[ApplicationError, Failure]:
    """Run one attempt of call_model as a worker would; return its error and that error as
    Temporal receives it."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, start_to_close_timeout=start_to_close)
    activities = ModelActivities(providers, ToolRegistry([]), LocalBlobStore(blob_dir))
    try:
        with pytest.raises(ApplicationError) as caught:
            await env.run(activities.call_model, call)
    finally:
        await providers.aclose()
    failure = Failure()
    DATA_CONVERTER.failure_converter.to_failure(
        caught.value, DATA_CONVERTER.payload_converter, failure
    )
    return caught.value, failure


async def test_unreachable_provider_fails_with_one_short_line(
    closed_port: int, tmp_path: Path
) -> None:
    base_url = f"http://127.0.0.1:{closed_port}/v1"

    err, failure = await _failure(_openai(base_url), tmp_path)
    said = await provider_error(_settings(base_url), HELLO.model)

    assert err.type == MODEL_UNAVAILABLE and not err.non_retryable
    # The provider's error, whole: named, with the SDK's and the transport's words (theirs:
    # tests/providers/test_errors.py) and the address tried.
    assert err.message == str(said)
    assert said.status is None and said.retryable
    assert err.message.startswith("openai: no response: ")
    assert err.message.endswith(f" ({base_url}/chat/completions)")
    # No chain of the SDK's and transport's exceptions, each with its traceback: that chain
    # is what pushed the failure past 4 KB, where the Web UI shows only its size.
    assert err.__cause__ is None and not failure.HasField("cause")
    assert failure.ByteSize() < FAILURE_BYTES


async def test_a_huge_error_body_is_cut_to_one_line(wire: WireServer, tmp_path: Path) -> None:
    wire.enqueue(error(502, "<html>\n" + "<p>Bad gateway</p>\n" * 2000 + "</html>"))

    err, failure = await _failure(_openai(wire.openai_base_url), tmp_path)

    assert err.type == MODEL_UNAVAILABLE
    assert err.message.startswith("openai: HTTP 502: <html> <p>Bad gateway</p> <p>Bad")
    assert "\n" not in err.message and len(err.message) <= FAILURE_CHARS
    assert failure.ByteSize() < FAILURE_BYTES


async def test_rate_limit_keeps_the_providers_delay(wire: WireServer, tmp_path: Path) -> None:
    wire.enqueue(error(429, "slow down", {"retry-after": "7"}))

    err, _ = await _failure(_openai(wire.openai_base_url), tmp_path)

    assert (err.type, err.non_retryable) == (MODEL_UNAVAILABLE, False)
    assert err.next_retry_delay == timedelta(seconds=7)
    assert err.message == "openai: HTTP 429: slow down"


async def test_a_hang_is_cut_before_the_timeout_naming_provider_and_limit(
    wire: WireServer, tmp_path: Path
) -> None:
    wire.enqueue(delayed(10, openai_text("too late")))

    err, _ = await _failure(
        _openai(wire.openai_base_url), tmp_path, start_to_close=timedelta(seconds=2)
    )

    assert (err.type, err.non_retryable) == (MODEL_UNAVAILABLE, False)
    assert err.message == "openai: no answer within the run's model_timeout of 2 s"
    assert len(wire.requests) == 1


@pytest.mark.parametrize("spec", ["anthropic: ", "openai:", "scripted: demo"])
async def test_a_blank_or_padded_model_name_is_refused_for_good(spec: str, tmp_path: Path) -> None:
    err, _ = await _failure(
        build_providers(Settings()), tmp_path, HELLO.model_copy(update={"model": spec})
    )

    assert (err.type, err.non_retryable) == (MODEL_SPEC_INVALID, True)
    assert repr(spec) in err.message


class _Crashing:
    """A provider with a bug deep in its stack (a stand-in: no SDK fails on demand)."""

    name = "crashing"

    async def complete(self, *_: object, **__: object) -> ModelResponse:
        """Fails whatever it is asked."""
        try:
            try:
                raise OSError("socket closed\n" + "detail " * 500)
            except OSError as err:
                raise ValueError("could not parse the reply") from err
        except ValueError as err:
            raise KeyError("choices") from err

    async def aclose(self) -> None:
        """Nothing to release."""


class _OwnProvider:
    """A user's provider written against the `Provider` protocol itself, not the built-in
    adapters' base: answers "ok" and keeps the model, system prompt, number of messages and
    settings of each call."""

    name = "own"

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, int, ModelSettings | None]] = []

    async def complete(
        self,
        model: str,
        system_prompt: str,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        settings: ModelSettings | None = None,
    ) -> ModelResponse:
        """Answers "ok"."""
        self.asked.append((model, system_prompt, len(messages), settings))
        return ModelResponse(message=Message(role="assistant", content="ok"), usage=Usage())

    async def aclose(self) -> None:
        """Nothing to release."""


class _OwnProviderBeforeSettings(_OwnProvider):
    """One written before `settings` existed: its `complete` takes four arguments."""

    async def complete(  # type: ignore[override]
        self,
        model: str,
        system_prompt: str,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
    ) -> ModelResponse:
        """Answers "ok"."""
        return await super().complete(model, system_prompt, messages, tools)


@pytest.mark.parametrize("kind", [_OwnProvider, _OwnProviderBeforeSettings])
async def test_a_users_own_provider_answers_a_call_without_settings(
    kind: type[_OwnProvider], tmp_path: Path
) -> None:
    provider = kind()
    activities = ModelActivities(
        Providers({"own": lambda: provider}), ToolRegistry([]), LocalBlobStore(tmp_path)
    )

    response = await ActivityEnvironment().run(
        activities.call_model, HELLO.model_copy(update={"model": "own:m", "system_prompt": "sys"})
    )

    assert response.message.content == "ok"
    assert provider.asked == [("m", "sys", 1, None)]


async def test_a_users_own_provider_gets_the_agents_settings(tmp_path: Path) -> None:
    provider = _OwnProvider()
    agents = {"tempered": Agent("tempered", temperature=0.3, max_tokens=200)}
    activities = ModelActivities(
        Providers({"own": lambda: provider}), ToolRegistry([]), LocalBlobStore(tmp_path), agents
    )

    await ActivityEnvironment().run(
        activities.call_model, HELLO.model_copy(update={"model": "own:m", "agent": "tempered"})
    )

    assert provider.asked == [("m", "", 1, ModelSettings(temperature=0.3, max_tokens=200))]


async def test_the_stored_conversation_is_owned_by_the_run(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    activities = ModelActivities(build_providers(Settings()), ToolRegistry([]), store)
    env = ActivityEnvironment()

    response = await env.run(
        activities.call_model, HELLO.model_copy(update={"model": "scripted:demo"})
    )

    assert response.transcript_ref is not None
    # A blob cleanup keeps it while the run (its workflow id) may still read it.
    assert await store.owners(f"ref://blobs/{response.transcript_ref}") == [env.info.workflow_id]


async def test_reasoning_items_go_back_from_the_transcript_and_stay_out_of_the_result(
    wire: WireServer, tmp_path: Path
) -> None:
    wire.enqueue(
        responses_function_calls([("call_1", "lookup", "{}")], reasoning="enc-1"),
        responses_text("done"),
    )
    providers = _openai(wire.openai_base_url)
    activities = ModelActivities(providers, ToolRegistry([]), LocalBlobStore(tmp_path))
    env = ActivityEnvironment()
    call = HELLO.model_copy(update={"model": "openai-responses:test-model"})
    result = Message(role="tool", tool_call_id="call_1", name="lookup", content="sunny")

    try:
        first = await env.run(activities.call_model, call)
        after = {"transcript_ref": first.transcript_ref, "new_messages": [result]}
        await env.run(activities.call_model, call.model_copy(update=after))
    finally:
        await providers.aclose()

    # What the run's history records of the reply: its message and calls, not the reasoning.
    assert first.message.provider_items is None
    assert [c.id for c in first.message.tool_calls] == ["call_1"]
    sent = wire.requests[1].body["input"]
    assert [i.get("encrypted_content") for i in sent if i.get("type") == "reasoning"] == ["enc-1"]


async def test_an_unexpected_error_keeps_its_type_and_loses_its_chain(tmp_path: Path) -> None:
    providers = Providers({"crashing": lambda: _Crashing()})

    err, failure = await _failure(
        providers, tmp_path, HELLO.model_copy(update={"model": "crashing:m"})
    )

    assert (err.type, err.non_retryable) == ("KeyError", False)
    assert err.message == "crashing: KeyError: 'choices'"
    assert not failure.HasField("cause") and failure.ByteSize() < FAILURE_BYTES


async def test_on_the_server_a_hanging_model_is_retried_with_that_error(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> None:
    # The activity's deadline is the attempt's start-to-close timeout less a tenth of it: with
    # 8 s, 0.8 s before Temporal's own, a margin a busy worker's poll and report fit in (with 2 s,
    # 0.2 s did not always, and Temporal's timeout came first).
    wire.enqueue(*[delayed(30) for _ in range(8)])
    settings = Settings(openai_base_url=wire.openai_base_url, openai_api_key="test-key")
    async with make_worker(dev_env.client, task_queue, settings=settings):
        handle = await start_run(
            dev_env.client,
            task_queue,
            RunInput(task="hang", model="openai:slow", model_timeout=timedelta(seconds=8)),
        )
        try:

            async def retried() -> PendingActivityInfo | None:
                description = await handle.describe()
                return next(
                    (
                        p
                        for p in description.raw_description.pending_activities
                        if p.attempt >= 2 and p.HasField("last_failure")
                    ),
                    None,
                )

            pending = await eventually(retried, "the model call's second attempt", 60)
        finally:
            await handle.terminate("test over")

    # The activity's own deadline fired first, not Temporal's StartToClose timeout.
    assert pending.last_failure.message == "openai: no answer within the run's model_timeout of 8 s"
    assert not pending.last_failure.HasField("timeout_failure_info")
    assert pending.maximum_attempts == 8
