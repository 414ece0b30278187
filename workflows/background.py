"""Background model responses (a model spec's `?background`): the run waits for a reply the
provider is still working on as an activity that polls it, heartbeating, not as a model call held
open for minutes. Past the run's `model_timeout`, or when the run is cancelled, the response is
cancelled at the provider, and the model call fails as one that timed out (or is cancelled).

The response's id is in the run's history (the model call's result): a worker that rebuilds the
run waits on for the same response. A run that never asks for one issues exactly the commands it
did before this module: its model calls' replies have no `background_id`.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from temporalio.exceptions import ActivityError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from waitstate.schemas import ModelCallInput, ModelResponse, RunState
from waitstate.schemas.run import (
    AWAIT_MODEL_RESPONSE,
    CANCEL_MODEL_RESPONSE,
    AwaitModelResponse,
    CancelModelResponse,
)

from . import ledger
from .activity_calls import Failed, call
from .plan import Plan
from .policies import (
    BACKGROUND_FIRST_POLL,
    BACKGROUND_MAX_POLL,
    BACKGROUND_RETRY,
    CANCEL_RETRY,
    CANCEL_TIMEOUT,
    poll_heartbeat,
)

Reply = TypeVar("Reply")


class BackgroundReplies:
    """The waits of one run's model calls for their background responses."""

    def __init__(self, plan: Plan, state: RunState) -> None:
        self._plan = plan
        self._state = state

    async def awaited(
        self, request: ModelCallInput, reply: Reply
    ) -> Reply | ModelResponse | Failed:
        """The model call's `reply`, or, when it is a background response not given yet, that
        response once given (or `Failed`: it ended without a reply, or not within the run's
        `model_timeout`, and was then cancelled).

        Raises:
            ActivityError, asyncio.CancelledError: the run is cancelled (the response was sent a
                cancel first).
        """
        if not isinstance(reply, ModelResponse) or reply.background_id is None:
            return reply
        response_id = reply.background_id
        wait = AwaitModelResponse(
            call=request,
            response_id=response_id,
            first_poll_seconds=BACKGROUND_FIRST_POLL.total_seconds(),
            max_poll_seconds=BACKGROUND_MAX_POLL.total_seconds(),
        )
        try:
            given = await call(
                AWAIT_MODEL_RESPONSE,
                wait,
                result_type=ModelResponse,
                summary=f"model {request.model} background {response_id}",
                schedule_to_close_timeout=self._plan.input.model_timeout,
                heartbeat_timeout=poll_heartbeat(BACKGROUND_MAX_POLL),
                retry_policy=BACKGROUND_RETRY,
            )
        except (asyncio.CancelledError, ActivityError):
            await self._cancel(request.model, response_id, "cancelled")
            raise
        if isinstance(given, Failed) and _out_of_time(given):
            await self._cancel(request.model, response_id, "expired")
        return given

    async def _cancel(self, model: str, response_id: str, reason: str) -> None:
        """Have the provider stop the response; whether it did is a step of the run's."""
        sent = await call(
            CANCEL_MODEL_RESPONSE,
            CancelModelResponse(model=model, response_id=response_id, reason=reason),
            result_type=type(None),
            summary=f"cancel {model} background {response_id}",
            start_to_close_timeout=CANCEL_TIMEOUT,
            retry_policy=CANCEL_RETRY,
        )
        if isinstance(sent, Failed):
            detail = f"background {response_id} {reason}; its cancel failed: {sent.message}"
            ledger.step(self._state, "event", model, ledger.preview(detail), is_error=True)
        else:
            detail = f"background {response_id} {reason}; it was cancelled"
            ledger.step(self._state, "event", model, detail)


def _out_of_time(failed: Failed) -> bool:
    err = failed.error
    return isinstance(err.cause, ActivityTimeoutError) or err.retry_state == RetryState.TIMEOUT
