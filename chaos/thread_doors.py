"""Issue 39's fault class (18): the doors into a thread. Threads are started through the gateway
twice at once; each then gets a message posted twice at once, and one whose answer its sender
loses (it gives up before reading it: the gateway goes on). Then their worker is stopped, and
each gets a message sent with no key, and a new thread is started with neither id nor key: the
gateway cannot know their outcome (Temporal holds them for the worker) and says so, 504
`outcome_unknown` with the key (and the new thread's id). Once the worker is back, the sender
sends each again with what the 504 named, until it is taken. Every thread's messages are then
counted by key: each message the sender meant once is there once, and nothing else is.

The threads have a task queue and a worker of their own (`chaos.stack`: `THREADS_QUEUE`, the
scripted `echo` model), which only this class stops: no other class's runs meet the outage, and
the random worker kills (class 1) never meet these threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from chaos.model import Check
from chaos.sizes import Size
from chaos.stack import OPERATOR_KEY, Stack
from waitstate.client import ClientError, WaitstateClient
from waitstate.schemas.threads import ThreadState

log = logging.getLogger("chaos")

ROW = "18 thread posts twice, answers lost, no worker: 0 duplicates, 0 lost"
# What the sender waits for an answer it then loses: it gives up (and hangs up) first.
LOST_ANSWER = httpx.Timeout(30.0, read=0.001)
# The gateway's answers that ask for the same request again: nothing was recorded (503), or its
# outcome is unknown (504).
SEND_AGAIN = frozenset({503, 504})
RETRY_EVERY = 1.0
# How long a sender keeps sending again, and how long the threads may take to answer what they
# were sent (far longer than either takes: only turns a hang into a violation).
PATIENCE = 120.0
HOWS = ("twice", "lost answer", "no worker")


@dataclass
class Sent:
    """One message the sender means its thread to have once: the thread (None until the gateway
    names the one it picked), the message's key (None until the gateway names the one it gave
    it), how it was sent, and the gateway's answers to each try (`202`, `504 outcome_unknown`)."""

    thread_id: str | None
    key: str | None
    how: str
    answers: list[str] = field(default_factory=list)


@dataclass
class ThreadDoors:
    """The class, on one stack: `run` returns its row (None in a size without it)."""

    stack: Stack
    size: Size
    sent: list[Sent] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)

    async def run(self) -> Check | None:
        if not self.size.thread_doors:
            return None
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                states = await self._drive(http)
        except Exception as err:  # noqa: BLE001 - a crashed class is a failed row, not a crash
            log.exception("the thread doors crashed")
            return Check(ROW, attempts=len(self.sent), violations=[f"crashed: {err!r}"])
        finally:
            assert self.stack.threads_worker is not None
            await self.stack.threads_worker.stop()
        return check(self.sent, states)

    async def _drive(self, http: httpx.AsyncClient) -> dict[str, ThreadState | None]:
        worker = self.stack.threads_worker
        assert worker is not None and self.stack.client is not None
        await worker.start()
        ids = [f"chaos-thread-{uuid.uuid4().hex[:8]}" for _ in range(self.size.thread_doors)]
        await asyncio.gather(*(self._start_twice(http, thread_id) for thread_id in ids))
        await asyncio.gather(
            *(self._post_twice(http, thread_id) for thread_id in ids),
            *(self._post_lost(http, thread_id) for thread_id in ids),
        )
        runs = WaitstateClient(self.stack.client)
        await asyncio.gather(*(_idle(runs, thread_id) for thread_id in ids))
        # No worker: nothing can tell the gateway what became of these.
        await worker.stop()
        unknown = [Sent(thread_id, None, "no worker") for thread_id in ids]
        unknown.append(Sent(None, None, "no worker"))  # a start, of a thread the gateway names
        self.sent += unknown
        await asyncio.gather(*(self._once(http, sent) for sent in unknown))
        await worker.start()
        await asyncio.gather(*(self._until_taken(http, sent) for sent in unknown))
        threads = {s.thread_id for s in self.sent if s.thread_id is not None}
        return {thread_id: await _thread(runs, thread_id) for thread_id in sorted(threads)}

    async def _start_twice(self, http: httpx.AsyncClient, thread_id: str) -> None:
        """Start the thread with its first message, twice at once (its id and key named)."""
        sent = Sent(thread_id, f"{thread_id}-start", "twice")
        self.sent.append(sent)
        await asyncio.gather(*(self._until_taken(http, sent) for _ in range(2)))

    async def _post_twice(self, http: httpx.AsyncClient, thread_id: str) -> None:
        sent = Sent(thread_id, f"{thread_id}-twice", "twice")
        self.sent.append(sent)
        await asyncio.gather(*(self._until_taken(http, sent) for _ in range(2)))

    async def _post_lost(self, http: httpx.AsyncClient, thread_id: str) -> None:
        """Post a message and hang up before its answer; then post it again (its key named)
        until it is taken."""
        sent = Sent(thread_id, f"{thread_id}-lost", "lost answer")
        self.sent.append(sent)
        await self._once(http, sent, lose_the_answer=True)
        await self._until_taken(http, sent)

    async def _until_taken(self, http: httpx.AsyncClient, sent: Sent) -> None:
        """Send `sent` (with what the gateway named) until the gateway says it was taken, or
        refuses it: again after a 503 or 504, and after a connection that failed."""
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            status = await self._once(http, sent)
            if status is not None and status not in SEND_AGAIN:
                return
            await asyncio.sleep(RETRY_EVERY)
        sent.answers.append("gave up")

    async def _once(
        self, http: httpx.AsyncClient, sent: Sent, *, lose_the_answer: bool = False
    ) -> int | None:
        """One try: its status (None: no answer read, as when `lose_the_answer`), recorded with
        what the answer names."""
        body: dict[str, Any] = {"text": f"a message sent {sent.how}"}
        if sent.key is not None:
            body["key"] = sent.key
        start = sent.thread_id is None or sent.thread_id not in self.tokens
        if start:
            url = f"{self.stack.gateway_url}/v1/threads"
            if sent.thread_id is not None:
                body["thread_id"] = sent.thread_id
            authorization = OPERATOR_KEY
        else:
            assert sent.thread_id is not None
            url = f"{self.stack.gateway_url}/v1/threads/{sent.thread_id}/messages"
            authorization = self.tokens[sent.thread_id]
        timeout = LOST_ANSWER if lose_the_answer else httpx.USE_CLIENT_DEFAULT
        try:
            response = await http.post(
                url,
                json=body,
                headers={"Authorization": f"Bearer {authorization}"},
                timeout=timeout,
            )
        except httpx.HTTPError as err:
            sent.answers.append(type(err).__name__)
            return None
        answer = response.json() if response.content else {}
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        sent.answers.append(f"{response.status_code} {error.get('code', '')}".strip())
        if response.status_code == 503 and sent.key is None:
            # Nothing was recorded: the next try may be named afresh, and is (a taken message's
            # answer does not say the key the gateway gave it).
            sent.key = f"chaos-{uuid.uuid4().hex}"
        if response.status_code == 504:
            sent.thread_id = sent.thread_id or error.get("thread_id")
            sent.key = sent.key or error.get("key")
        if start and response.status_code == 201:
            self.tokens[answer["thread_id"]] = answer["thread_token"]
            sent.thread_id = answer["thread_id"]
        return response.status_code


async def _idle(runs: WaitstateClient, thread_id: str) -> None:
    """Until the thread has answered every message it took (its worker then holds nothing of
    it), or `PATIENCE` has passed."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        state = await _thread(runs, thread_id)
        if state is not None and all(m.status not in ("queued", "working") for m in state.messages):
            return
        await asyncio.sleep(RETRY_EVERY)


async def _thread(runs: WaitstateClient, thread_id: str) -> ThreadState | None:
    """The thread's state, as its run answers (None if it does not within `PATIENCE`)."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        try:
            return (await runs.query(thread_id)).thread
        except ClientError:
            await asyncio.sleep(RETRY_EVERY)
    return None


def check(sent: list[Sent], threads: dict[str, ThreadState | None]) -> Check:
    """The row: each thread's messages, counted by key, against what was sent to it. A key
    sent that the thread does not have is lost; one it has twice, or a message whose key no
    send had (a retry that came without its key), is a duplicate."""
    row = Check(ROW, attempts=len(sent))
    duplicates = lost = 0
    for each in sent:
        if each.key is None or each.thread_id is None:
            lost += 1
            row.violations.append(
                f"a message sent {each.how} was never named by the gateway: {each.answers}"
            )
    for thread_id, state in threads.items():
        mine = {s.key: s for s in sent if s.thread_id == thread_id and s.key is not None}
        if state is None:
            lost += len(mine)
            row.violations.append(f"{thread_id}: the thread did not answer; {len(mine)} unseen")
            continue
        kept = Counter(m.key for m in state.messages)
        if state.received != len(state.messages):
            row.violations.append(
                f"{thread_id}: took {state.received} messages and keeps {len(state.messages)}: "
                "too many to count"
            )
        for key, each in mine.items():
            if kept[key] == 0:
                lost += 1
                row.violations.append(f"{thread_id}: {key} ({each.how}) lost: {each.answers}")
            elif kept[key] > 1:
                duplicates += kept[key] - 1
                row.violations.append(
                    f"{thread_id}: {key} ({each.how}) taken {kept[key]} times: {each.answers}"
                )
        for other, times in kept.items():
            if other not in mine:
                duplicates += times
                row.violations.append(f"{thread_id}: {times} message(s) of no key sent ({other})")
    hows = Counter(s.how for s in sent)
    answers = Counter(a for s in sent for a in s.answers)
    said = ", ".join(f"{hows[how]} {how}" for how in HOWS if hows[how])
    told = ", ".join(f"{n}×{answer}" for answer, n in sorted(answers.items()))
    row.outcome = (
        f"{len(threads)} threads, {len(sent)} messages ({said}); answers {told}; "
        f"{duplicates} duplicates, {lost} lost"
    )
    return row
