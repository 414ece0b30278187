"""The model-call activity: a thin adapter from a provider to Temporal's retry semantics."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from providers import ProviderError, Providers, UnknownModelError
from schemas import ModelCallInput, ModelResponse
from schemas.errors import (
    MODEL_REQUEST_REJECTED,
    MODEL_SPEC_INVALID,
    MODEL_UNAVAILABLE,
    RUN_INPUT_INVALID,
)
from schemas.run import CALL_MODEL
from tools import ToolRegistry


class ModelActivities:
    """Model calls, given the providers and the tool registry the worker was built with."""

    def __init__(self, providers: Providers, tools: ToolRegistry) -> None:
        self._providers = providers
        self._tools = tools

    @activity.defn(name=CALL_MODEL)
    async def call_model(self, input: ModelCallInput) -> ModelResponse:
        """Ask the run's model for its next message.

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
        try:
            return await provider.complete(model, input.system_prompt, input.messages, tools)
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
