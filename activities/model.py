"""The model-call activity: a thin adapter from a provider to Temporal's retry semantics."""

from __future__ import annotations

from datetime import timedelta

from pydantic import TypeAdapter
from temporalio import activity
from temporalio.exceptions import ApplicationError

from blobs import BlobNotFound, BlobStore
from providers import ProviderError, Providers, UnknownModelError
from schemas import Message, ModelCallInput, ModelResponse
from schemas.errors import (
    MODEL_REQUEST_REJECTED,
    MODEL_SPEC_INVALID,
    MODEL_UNAVAILABLE,
    RUN_INPUT_INVALID,
)
from schemas.run import CALL_MODEL
from tools import ToolRegistry

_TRANSCRIPT = TypeAdapter(list[Message])


class ModelActivities:
    """Model calls, given the providers, the tool registry, and the blob store that holds
    conversations (shared by every worker, so any worker can take any turn)."""

    def __init__(self, providers: Providers, tools: ToolRegistry, blobs: BlobStore) -> None:
        self._providers = providers
        self._tools = tools
        self._blobs = blobs

    @activity.defn(name=CALL_MODEL)
    async def call_model(self, input: ModelCallInput) -> ModelResponse:
        """Ask the run's model for its next message.

        The conversation is the stored transcript `input.transcript_ref` followed by
        `input.new_messages`; the reply comes back with a reference to the conversation
        including it, so the run's history never carries the whole transcript.

        Raises:
            ApplicationError: non-retryable when the request itself is wrong (bad spec, unknown
                tool, a 4xx the provider will repeat); retryable otherwise, with the provider's
                `retry-after` as the next delay.
        """
        try:
            provider, model = self._providers.resolve(input.model)
        except UnknownModelError as err:
            raise ApplicationError(str(err), type=MODEL_SPEC_INVALID, non_retryable=True) from err
        try:
            tools = self._tools.definitions(input.tools)
        except KeyError as err:
            raise ApplicationError(err.args[0], type=RUN_INPUT_INVALID, non_retryable=True) from err
        conversation = await self._conversation(input)
        try:
            response = await provider.complete(model, input.system_prompt, conversation, tools)
        except UnknownModelError as err:
            raise ApplicationError(str(err), type=MODEL_SPEC_INVALID, non_retryable=True) from err
        except ProviderError as err:
            if not err.retryable:
                raise ApplicationError(
                    str(err), type=MODEL_REQUEST_REJECTED, non_retryable=True
                ) from err
            delay = timedelta(seconds=err.retry_after) if err.retry_after is not None else None
            raise ApplicationError(
                str(err), type=MODEL_UNAVAILABLE, next_retry_delay=delay
            ) from err
        meter = activity.metric_meter()
        labels = {"provider": provider.name}
        meter.create_counter("waitstate_model_calls", "Model calls").add(1, labels)
        tokens = meter.create_counter("waitstate_model_tokens", "Model tokens")
        tokens.add(response.usage.input_tokens, {**labels, "direction": "input"})
        tokens.add(response.usage.output_tokens, {**labels, "direction": "output"})
        # Content-addressed: a retried or replayed turn names the very same conversation.
        stored = _TRANSCRIPT.dump_json([*conversation, response.message])
        response.transcript_ref = await self._blobs.put(stored)
        return response

    async def _conversation(self, input: ModelCallInput) -> list[Message]:
        earlier = []
        if input.transcript_ref is not None:
            earlier = _TRANSCRIPT.validate_json(await self._blob(input.transcript_ref))
        new = [
            message.model_copy(
                update={
                    "content": (await self._blob(message.content_ref)).decode(),
                    "content_ref": None,
                }
            )
            if message.content_ref
            else message
            for message in input.new_messages
        ]
        return [*earlier, *new]

    async def _blob(self, ref: str) -> bytes:
        try:
            return await self._blobs.get(ref)
        except BlobNotFound as err:
            raise ApplicationError(
                f"{ref} is not in this worker's blob store (workers must share one)",
                type=RUN_INPUT_INVALID,
                non_retryable=True,
            ) from err
