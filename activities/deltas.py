"""A model call's text, posted to the gateway as it is written (`POST /v1/runs/{run_id}/deltas`)
for the run's readers: never into the call's result or the run's history, never at the call's
cost."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
from temporalio import activity

if TYPE_CHECKING:
    from waitstate.auth.tokens import ResumeTokens

# A call's text goes to the gateway at most every DELTA_INTERVAL seconds, or as soon as
# DELTA_BATCH_CHARS characters are waiting (a post carries at most that many), one post at a
# time so they arrive in order. A post slower than DELTA_POST_TIMEOUT, or refused, drops the
# call's remaining text: readers see the answer in `model.ended`'s turn anyway. An answered call
# waits at most DELTA_DRAIN for its last text to go out, and only while the gateway answers.
DELTA_INTERVAL = 0.1
DELTA_BATCH_CHARS = 2_000
DELTA_POST_TIMEOUT = 2.0
DELTA_DRAIN = 0.5


@dataclass(frozen=True)
class DeltaTarget:
    """Where model calls post their text as it is written: the gateway at `gateway_url`,
    with `tokens` to mint each call a publish token for its run."""

    http: httpx.AsyncClient
    tokens: ResumeTokens
    gateway_url: str


class DeltaPublisher:
    """Posts one model call's text to the gateway as it is written, in batches, one post at a
    time. It never holds the call up: `add` only queues, and a post that fails, is refused or
    is slow drops the call's text from then on (logged once)."""

    def __init__(
        self, http: httpx.AsyncClient, url: str, token: str, turn: int | None, call: str
    ) -> None:
        self._http = http
        self._url = url
        self._headers = {"Authorization": f"Bearer {token}"}
        self._turn = turn
        self._call = call
        self._waiting: list[str] = []
        self._chars = 0
        self._full = asyncio.Event()  # DELTA_BATCH_CHARS are waiting, or the call is answered
        self._finishing = False
        self._dropped = False
        self._last_post = 0.0  # time.monotonic() of the latest post
        self._posting: asyncio.Task[None] | None = None

    async def add(self, text: str) -> None:
        """Queue a piece of the answer's text (the provider's `on_text`)."""
        if self._dropped:
            return
        self._waiting.append(text)
        self._chars += len(text)
        if self._chars >= DELTA_BATCH_CHARS:
            self._full.set()
        if self._posting is None:
            self._posting = asyncio.create_task(self._post_waiting())

    async def finish(self) -> None:
        """Post what is waiting, waiting for that at most `DELTA_DRAIN`."""
        self._finishing = True
        self._full.set()
        if self._posting is None:
            return
        try:
            await asyncio.wait_for(self._posting, DELTA_DRAIN)
        except TimeoutError:  # wait_for cancelled the post
            self._drop(f"no answer within {DELTA_DRAIN:g} s")
        except Exception as err:  # a bug of ours: still never the call's failure
            self._drop(f"{type(err).__name__}: {err}")

    def stop(self) -> None:
        """Give up on what is not posted yet (the call failed, or `finish` is done)."""
        self._dropped = True
        if self._posting is not None:
            self._posting.cancel()

    async def _post_waiting(self) -> None:
        while self._waiting and not self._dropped:
            due = self._last_post + DELTA_INTERVAL - time.monotonic()
            if due > 0 and not self._finishing and not self._full.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), due)
            text = "".join(self._waiting)
            self._waiting.clear()
            self._chars = 0
            if not self._finishing:
                self._full.clear()
            self._last_post = time.monotonic()
            for start in range(0, len(text), DELTA_BATCH_CHARS):
                await self._post(text[start : start + DELTA_BATCH_CHARS])
        self._posting = None

    async def _post(self, text: str) -> None:
        if self._dropped:
            return
        body = {"turn": self._turn, "call": self._call, "text": text}
        try:
            answer = await self._http.post(
                self._url, json=body, headers=self._headers, timeout=DELTA_POST_TIMEOUT
            )
        except httpx.HTTPError as err:
            self._drop(type(err).__name__)
            return
        except Exception as err:  # e.g. a malformed gateway URL: never the call's failure
            self._drop(f"{type(err).__name__}: {err}")
            return
        if answer.status_code != 202:
            self._drop(f"HTTP {answer.status_code}")

    def _drop(self, why: str) -> None:
        if not self._dropped:
            # The URL names the run, never the token.
            activity.logger.warning(
                "the model's text is not streamed to %s (%s): the rest of it is dropped",
                self._url,
                why,
            )
        self._dropped = True
        self._waiting.clear()
