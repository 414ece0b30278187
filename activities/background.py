"""Background model responses (a model spec's `?background`): the wait for a reply the provider
is still working on, and the cancel of one the run no longer wants.

The model call that created the response returned at once with its id
(`ModelResponse.background_id`), which is in the run's history: any worker can take the wait
over from it, and the provider is never asked twice for the same reply.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from waitstate.providers import ProviderError, Providers, UnknownModelError
from waitstate.providers.base import BackgroundProvider, ResponseFailed
from waitstate.schemas import ModelResponse
from waitstate.schemas.errors import (
    CANCEL_REFUSED,
    MODEL_REQUEST_REJECTED,
    MODEL_RESPONSE_FAILED,
    MODEL_SPEC_INVALID,
    MODEL_UNAVAILABLE,
)
from waitstate.schemas.run import (
    AWAIT_MODEL_RESPONSE,
    CANCEL_MODEL_RESPONSE,
    AwaitModelResponse,
    CancelModelResponse,
)

from .model import ModelActivities, failure

# As the model call's failures: one line, small enough for Temporal to keep whole.
FAILURE_CHARS = 600
# The type of the failure that hands a wait over to another worker when this one shuts down.
WORKER_SHUTDOWN = "WorkerShutdown"


class BackgroundActivities:
    """Waits for and cancels the background responses of the model calls that `model` makes
    (whose blob store and agents the replies go through), on `providers`."""

    def __init__(self, model: ModelActivities, providers: Providers) -> None:
        self._model = model
        self._providers = providers

    @activity.defn(name=AWAIT_MODEL_RESPONSE)
    async def await_model_response(self, input: AwaitModelResponse) -> ModelResponse:
        """Ask the provider for a background response until it is given, heartbeating each
        check; the reply as `call_model` returns one (checked against the agent's output type,
        stored after the conversation, counted in the metrics).

        The checks are `first_poll_seconds` apart at first, doubling up to `max_poll_seconds`.
        A check that fails (unreachable, 5xx) is logged and the checks go on: the run's limit on
        the wait decides when to give up. When the worker shuts down, the attempt fails at once
        (retryable): another worker takes the wait over from the response's id.

        Raises:
            ApplicationError: non-retryable when the response ended without a reply
                (`MODEL_RESPONSE_FAILED`), the provider refused to say (`MODEL_REQUEST_REJECTED`),
                or the spec names no provider that answers in the background.
        """
        provider, model = self._provider(input.call.model)
        details = activity.info().heartbeat_details
        checks = int(details[0]) if details else 0
        # Taken over: check at once, then go on at the interval the wait had reached.
        delay = 0.0 if checks else input.first_poll_seconds
        interval = min(input.first_poll_seconds * 2**checks, input.max_poll_seconds)
        while True:
            await _sleep_unless_shutdown(delay)
            checks += 1
            try:
                reply = await provider.poll(input.response_id, model)
            except ResponseFailed as err:
                raise failure(str(err), MODEL_RESPONSE_FAILED, non_retryable=True) from None
            except UnknownModelError as err:
                raise failure(str(err), MODEL_SPEC_INVALID, non_retryable=True) from None
            except ProviderError as err:
                if not err.retryable:
                    raise failure(str(err), MODEL_REQUEST_REJECTED, non_retryable=True) from None
                activity.logger.warning("check of %s failed: %s", input.response_id, err)
                reply = None
                interval = max(interval, err.retry_after or 0)
            if reply is not None:
                break
            activity.heartbeat(checks)
            delay, interval = interval, min(interval * 2, input.max_poll_seconds)
        activity.logger.info("%s answered after %d checks", input.response_id, checks)
        response = self._model.counted(input.call, provider, reply)
        conversation = await self._model.conversation(input.call)
        return await self._model.kept(input.call, conversation, response)

    @activity.defn(name=CANCEL_MODEL_RESPONSE)
    async def cancel_model_response(self, input: CancelModelResponse) -> None:
        """Ask the provider to stop a background response the run no longer waits for.

        Raises:
            ApplicationError: non-retryable (`CANCEL_REFUSED`) when the provider refuses;
                retryable when it could not be reached or answered 408/409/429/5xx.
        """
        provider, _ = self._provider(input.model)
        activity.logger.info("cancelling %s (%s): %s", input.response_id, input.model, input.reason)
        try:
            await provider.cancel(input.response_id)
        except ProviderError as err:
            if not err.retryable:
                raise failure(str(err), CANCEL_REFUSED, non_retryable=True) from None
            delay = timedelta(seconds=err.retry_after) if err.retry_after is not None else None
            raise failure(str(err), MODEL_UNAVAILABLE, next_retry_delay=delay) from None

    def _provider(self, spec: str) -> tuple[BackgroundProvider, str]:
        try:
            provider, model = self._providers.resolve(spec)
        except UnknownModelError as err:
            raise failure(str(err), MODEL_SPEC_INVALID, non_retryable=True) from None
        if not isinstance(provider, BackgroundProvider):
            why = f"{provider.name} answers no background responses ({spec})"
            raise failure(why, MODEL_SPEC_INVALID, non_retryable=True)
        return provider, model


async def _sleep_unless_shutdown(seconds: float) -> None:
    """Sleep; if the worker shuts down meanwhile, fail the attempt (retryable): a wait holds
    nothing worth finishing here, and another worker takes it over at once."""
    try:
        await asyncio.wait_for(activity.wait_for_worker_shutdown(), seconds)
    except TimeoutError:
        return
    raise ApplicationError(
        "the worker shuts down: another takes the wait over", type=WORKER_SHUTDOWN
    )
