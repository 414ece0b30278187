"""Webhooks as real senders send them: a report that was not taken (no answer, a 5xx, 408 or
429) is sent again with backoff (0.5 s doubling up to 30 s) for 10 minutes (`WebhookRetry`);
any other answer is the receiver's final word. Every attempt is recorded (`WebhookAttempt`)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
from pydantic import BaseModel, Field

from waitstate import Completion

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = httpx.Timeout(5.0)
# Answers after which a webhook is sent again (besides no answer at all): the receiver is busy
# or unwell. Any other 4xx is its final word, recorded and not retried.
WEBHOOK_RETRYABLE = frozenset({408, 429})


@dataclass(frozen=True)
class WebhookRetry:
    """How the systems send a webhook again when it was not taken (no answer, a 5xx, 408 or
    429), as real senders do (Stripe, GitHub, Standard Webhooks retry for hours): backoff from
    `first` seconds, doubled after each attempt up to `cap`, until `give_up_after` seconds
    have passed since the report's first attempt. A gateway that is down for a restart or a
    deploy gets the report once it is back.
    """

    first: float = 0.5
    cap: float = 30.0
    give_up_after: float = 600.0

    def delays(self) -> Iterator[float]:
        """The waits between attempts, for as long as the report may still be sent."""
        delay, waited = self.first, 0.0
        while waited + delay <= self.give_up_after:
            yield delay
            waited += delay
            delay = min(delay * 2, self.cap)


class WebhookAttempt(BaseModel):
    """One POST of a webhook, and what the receiver answered."""

    report: str = Field(default="", description="What was reported: 'running 50%', 'succeeded'.")
    webhook_id: str = Field(
        default="", description="The Webhook-Id header: one per report, kept by its copies."
    )
    delivery: int = Field(description="1, then 2... when `duplicate_webhooks` repeats it.")
    attempt: int = Field(description="1, then 2... when a failed attempt is retried.")
    after_seconds: float = Field(
        default=0.0, description="When it was sent, in seconds after the report's first attempt."
    )
    status_code: int | None = None
    answer: str | None = Field(default=None, description="The answer's body (truncated).")
    error: str | None = Field(default=None, description="Why no answer came (connection...).")


class Webhooks:
    """What sends the systems' webhooks: one HTTP client, from `open` to `aclose` (the
    systems' `async with`)."""

    def __init__(self) -> None:
        self._http: httpx.AsyncClient | None = None

    def open(self) -> None:
        """Open the client the webhooks are sent with."""
        self._http = httpx.AsyncClient(timeout=WEBHOOK_TIMEOUT)

    async def aclose(self) -> None:
        """Close the client, if it is open."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def deliver(
        self,
        url: str,
        completion: Completion,
        *,
        token: str | None,
        copies: int,
        retry: WebhookRetry,
        attempts: list[WebhookAttempt],
        about: str,
    ) -> WebhookAttempt | None:
        """POST the report `copies` times, each copy retried while it is not taken, every
        attempt appended to `attempts`; returns the last attempt (None if there were no copies
        to send). `about` names the job in the log ("export job exp_...")."""
        assert self._http is not None, "DemoSystems is used outside its `async with`"
        body = completion.model_dump(mode="json", exclude_none=True)
        report = " ".join(filter(None, [completion.status, completion.progress]))
        # One id per report, kept by its retries and copies (as Standard Webhooks' webhook-id):
        # the receiver tells a copy of this report from another report with the same body.
        webhook_id = f"whk_{uuid.uuid4().hex[:16]}"
        headers = {"Authorization": f"Bearer {token}", "Webhook-Id": webhook_id}
        loop = asyncio.get_running_loop()
        last: WebhookAttempt | None = None
        for delivery in range(1, copies + 1):
            first = loop.time()
            delays = retry.delays()
            for attempt in itertools.count(1):
                record = WebhookAttempt(
                    report=report,
                    webhook_id=webhook_id,
                    delivery=delivery,
                    attempt=attempt,
                    after_seconds=round(loop.time() - first, 3),
                )
                attempts.append(record)
                try:
                    response = await self._http.post(url, json=body, headers=headers)
                except httpx.TransportError as err:
                    record.error = f"{type(err).__name__}: {err}"
                else:
                    record.status_code = response.status_code
                    record.answer = response.text[:1000]
                    if response.status_code < 500 and response.status_code not in WEBHOOK_RETRYABLE:
                        break
                delay = next(delays, None)
                if delay is None:
                    break  # given up: the job's status still tells its outcome
                await asyncio.sleep(delay)
            logger.info("%s webhook %d: %s", about, delivery, record.status_code or record.error)
            last = record
        return last
