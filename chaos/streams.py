"""Every run's event stream, read through the gateway as a person's page reads it: from the
run's first event, resumed with `Last-Event-ID` after every cut (the gateway SIGKILLed and
started again, a connection dropped), until the run's end. What each reader got must be what
the run's history says, in order: no event missing, none twice, none out of order, across
worker kills and gateway restarts.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from chaos.model import Check
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import END_KINDS
from waitstate.client._events import told

STREAMS = "streams: every event of every run, in order, across kills and restarts"
ENDS = frozenset(END_KINDS)
RETRY = (0.2, 2.0)  # seconds between a reader's tries while the gateway is away
FINISH_WITHIN = 60.0  # seconds a reader may take to get its run's last event once it ended


@dataclass
class StreamRead:
    """What one reader got of its run's stream."""

    run_id: str
    ids: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    resumes: int = 0  # connections after the first (each resumed after its last event)
    ended: bool = False  # it got the chain's last event
    problems: list[str] = field(default_factory=list)


class Streams:
    """Readers of runs' streams on one gateway, with view tokens from the fleet's keys."""

    def __init__(self, gateway_url: str, keys: dict[str, str]) -> None:
        self._url = gateway_url
        self._tokens = ResumeTokens(keys, next(iter(keys)))
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(30, read=None), limits=limits)

    def follow(self, run_id: str, first_run: str) -> asyncio.Task[StreamRead]:
        """A reader of `run_id`'s stream from its first run's start, until the chain ends."""
        return asyncio.create_task(self._read(run_id, first_run))

    async def finish(self, reading: asyncio.Task[StreamRead]) -> StreamRead:
        """What the reader got, once it has its run's last event (or `FINISH_WITHIN` passed)."""
        try:
            return await asyncio.wait_for(asyncio.shield(reading), FINISH_WITHIN)
        except TimeoutError:
            reading.cancel()
            read = await asyncio.gather(reading, return_exceptions=True)
            got = read[0] if isinstance(read[0], StreamRead) else None
            return got or StreamRead("?", problems=["the reader never finished"])

    async def close(self) -> None:
        await self._http.aclose()

    async def _read(self, run_id: str, first_run: str) -> StreamRead:
        read = StreamRead(run_id)
        token = self._tokens.mint_view(run_id, datetime.now(UTC) + timedelta(days=1))
        url = f"{self._url}/v1/runs/{run_id}/events?token={token}"
        last = f"{first_run}.0"
        pause = RETRY[0]
        try:
            while not read.ended:
                try:
                    async with self._http.stream(
                        "GET", url, headers={"Last-Event-ID": last}
                    ) as response:
                        if response.status_code == 204:
                            read.ended = True  # nothing after the last event it had
                            break
                        if response.status_code != 200:
                            await response.aread()
                            raise httpx.HTTPStatusError(
                                f"{response.status_code}",
                                request=response.request,
                                response=response,
                            )
                        pause = RETRY[0]
                        async for event in _events(response):
                            if "id" not in event:
                                continue  # of the moment (a retry, a delta): never in history
                            read.ids.append(event["id"])
                            read.kinds.append(event["kind"])
                            last = event["id"]
                            if event["kind"] in ENDS:
                                read.ended = True
                                break
                except (httpx.HTTPError, ValueError) as err:
                    if isinstance(err, httpx.HTTPStatusError) and err.response.status_code < 500:
                        read.problems.append(f"refused: {err.response.text[:200]}")
                        return read
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, RETRY[1])
                if not read.ended:
                    read.resumes += 1
        except asyncio.CancelledError:
            read.problems.append("the reader never got the run's last event")
            return read
        return read


async def _events(response: httpx.Response) -> Any:
    data = None
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
        elif not line and data is not None:
            yield json.loads(data)
            data = None


def expected(first_run: str, chain: list[list[Any]]) -> list[tuple[str, str]]:
    """What a reader of the chain from its first run's start must get: (id, kind) in order."""
    wanted: list[tuple[str, str]] = []
    run: str | None = first_run
    for events in chain:
        if run is None:
            break
        got, run = told(run, events)
        wanted += [(e.id, e.kind) for e in got]
    return wanted


def check(reads: list[tuple[StreamRead, list[tuple[str, str]]]]) -> Check:
    """The row: each reader's events against its run's history."""
    row = Check(STREAMS, attempts=len(reads))
    events = resumes = 0
    for read, wanted in reads:
        got = list(zip(read.ids, read.kinds, strict=True))
        events += len(got)
        resumes += read.resumes
        row.violations += [f"{read.run_id}: {problem}" for problem in read.problems]
        if got != wanted:
            missing = [e for e in wanted if e not in got]
            twice = len(got) - len(set(got))
            row.violations.append(
                f"{read.run_id}: streamed {len(got)} events, history has {len(wanted)} "
                f"({len(missing)} missing, {twice} twice, first missing {missing[:1]})"
            )
    row.outcome = f"{len(reads)} runs, {events} events, {resumes} resumes" + (
        "" if row.ok else f"; {len(row.violations)} violations"
    )
    return row
