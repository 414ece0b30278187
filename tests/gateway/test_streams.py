"""A run's feed: one reading of its events for all its readers. A stand-in for `RunEvents` says
how often the run was read and lets the test append its events; the end to end path (the real
history, over HTTP) is in test_events.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from waitstate.client import BadPosition, Position, Retry, RunEvent, RunEvents
from waitstate.gateway import streams
from waitstate.gateway.streams import CallRetry, Feeds, ModelDelta, Read

RUN = "r1"
START = Position(RUN, 0)


class Appended(RunEvents):
    """A run whose events the test appends; counts its readings."""

    def __init__(self) -> None:
        self.readings: list[Position] = []
        self.events: list[RunEvent] = []
        self.ended = False
        self._more = asyncio.Condition()

    async def append(self, *kinds: str, end: bool = False) -> None:
        async with self._more:
            for kind in kinds:
                number = len(self.events) + 1
                self.events.append(RunEvent(id=f"{RUN}.{number}", kind=kind, at=datetime.now(UTC)))
            self.ended = end
            self._more.notify_all()

    async def follow(self, run_id: str, start: Position) -> AsyncIterator[RunEvent]:
        self.readings.append(start)
        sent = start.event_id
        while True:
            async with self._more:
                await self._more.wait_for(lambda n=sent: len(self.events) > n or self.ended)
                fresh = self.events[sent:]
            for event in fresh:
                yield event
            sent += len(fresh)
            if self.ended and sent == len(self.events):
                return


async def _take(reader: AsyncIterator[Read], count: int) -> list[str]:
    async with asyncio.timeout(10):
        return [(await anext(reader)).kind for _ in range(count)]


async def _rest(reader: AsyncIterator[Read]) -> list[str]:
    async with asyncio.timeout(10):
        return [event.kind async for event in reader]


async def _joined(feeds: Feeds, run: Appended, count: int) -> list[AsyncIterator[Read]]:
    """`count` readers of `run` from its start, each past its first event (run.started): all
    have joined its one feed."""
    readers = [feeds.read(RUN, START) for _ in range(count)]
    await run.append("run.started")
    for reader in readers:
        assert await _take(reader, 1) == ["run.started"]
    return readers


async def test_readers_of_a_run_share_one_reading_and_a_late_one_gets_what_it_missed() -> None:
    run = Appended()
    feeds = Feeds(run)
    first = feeds.read(RUN, START)
    await run.append("run.started", "model.started")
    took_first = await _take(first, 2)
    second = feeds.read(RUN, START)  # joins late: gets the two it missed, then the rest
    resumed = feeds.read(RUN, Position(RUN, 1))  # after the first event
    took_second = await _take(second, 2)
    took_resumed = await _take(resumed, 1)
    await run.append("model.ended", "run.completed", end=True)

    assert took_first == took_second == ["run.started", "model.started"]
    assert took_resumed == ["model.started"]
    assert await _rest(first) == await _rest(second) == ["model.ended", "run.completed"]
    assert await _rest(resumed) == ["model.ended", "run.completed"]
    assert run.readings == [START]  # one reading for three readers
    assert len(feeds) == 0  # the feed stopped with its last reader


async def test_a_reader_the_feed_cannot_serve_reads_the_run_alone() -> None:
    run = Appended()
    await run.append("run.started", "model.started", "model.ended")
    feeds = Feeds(run)
    first = feeds.read(RUN, Position(RUN, 2))  # the feed starts here
    assert await _take(first, 1) == ["model.ended"]
    alone = feeds.read(RUN, START)  # before the feed's start: never read by it
    assert await _take(alone, 3) == ["run.started", "model.started", "model.ended"]
    await run.append("run.completed", end=True)

    assert await _rest(first) == await _rest(alone) == ["run.completed"]
    assert run.readings == [Position(RUN, 2), START]


async def test_a_reader_too_far_behind_is_let_go_and_the_others_read_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "MAX_BEHIND", 3)
    run = Appended()
    slow, quick = await _joined(Feeds(run), run, 2)
    quick_took = []
    for kind in ("a", "b", "c", "d", "e"):  # the quick one takes each as it comes
        await run.append(kind)
        quick_took += await _take(quick, 1)
    await run.append("run.completed", end=True)

    # The slow one had three waiting when the fourth came: it gets those, then its stream ends
    # (its client resumes after the last it had).
    assert await _rest(slow) == ["a", "b", "c"]
    assert quick_took + await _rest(quick) == ["a", "b", "c", "d", "e", "run.completed"]


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("7f1c-e2.5", Position("7f1c-e2", 5)),
        ("7f1c-e2.0", Position("7f1c-e2", 0)),  # before the run's first event
    ],
)
def test_an_event_id_names_a_position(text: str, position: Position) -> None:
    assert Position.parse(text) == position


@pytest.mark.parametrize(
    "text", ["", "run", "run.", ".5", "run.05", "run.-1", "run.5.6", "ru n.5", "r" * 101 + ".5"]
)
def test_anything_else_is_no_position(text: str) -> None:
    with pytest.raises(BadPosition):
        Position.parse(text)


def _delta(text: str) -> ModelDelta:
    return ModelDelta(turn=1, call="1.1", text=text, at=datetime.now(UTC))


async def test_a_delta_reaches_the_readers_of_the_moment_only_and_is_never_kept() -> None:
    run = Appended()
    feeds = Feeds(run)
    assert feeds.publish(RUN, _delta("nobody reads")) == 0  # no feed: dropped
    first, second = await _joined(feeds, run, 2)

    reached = feeds.publish(RUN, _delta("Hel"))
    other_run = feeds.publish("r2", _delta("not theirs"))
    late = feeds.read(RUN, START)  # joins after the delta: gets the events only
    await run.append("model.ended", "run.completed", end=True)

    assert (reached, other_run) == (2, 0)
    for reader in (first, second):
        async with asyncio.timeout(10):
            got = [read async for read in reader]
        assert [(r.kind, getattr(r, "text", None)) for r in got] == [
            ("model.delta", "Hel"),
            ("model.ended", None),
            ("run.completed", None),
        ]
        assert isinstance(got[0], ModelDelta) and not hasattr(got[0], "id")
    assert await _rest(late) == ["run.started", "model.ended", "run.completed"]


async def test_deltas_count_towards_a_slow_readers_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "MAX_BEHIND", 3)
    run = Appended()
    feeds = Feeds(run)
    [slow] = await _joined(feeds, run, 1)
    reached = [feeds.publish(RUN, _delta(text)) for text in ("a", "b", "c", "d")]

    # Three waiting when the fourth came: it is let go (its stream ends after those three).
    assert reached == [1, 1, 1, 0]
    async with asyncio.timeout(10):
        assert [read.kind async for read in slow] == ["model.delta"] * 3


class Retrying(Appended):
    """A run whose calls' attempts the test sets; counts how often they were looked at."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts: list[Retry] = []
        self.looks = 0

    async def retries(self, run_id: str) -> list[Retry]:
        self.looks += 1
        return list(self.attempts)


def _attempt(number: int) -> Retry:
    return Retry("model call", "4", number, 8, "openai: HTTP 500: the secret prompt", "Boom")


async def test_a_calls_attempts_reach_its_readers_once_each_and_an_idle_run_is_never_looked_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "RETRY_LOOK_SECONDS", 0.01)
    run = Retrying()
    feeds = Feeds(run)
    reader = feeds.read(RUN, START)
    await run.append("run.started", "tool.started", "tool.ended")
    await _take(reader, 3)
    await asyncio.sleep(0.2)  # twenty looks' worth, with no call open
    idle_looks = run.looks

    run.attempts = [_attempt(2)]
    await run.append("model.started")
    async with asyncio.timeout(10):
        got = [await anext(reader) for _ in range(2)]
        run.attempts = [_attempt(3)]
        got.append(await anext(reader))
    await run.append("model.ended", "run.completed", end=True)
    got += [read async for read in reader]

    assert idle_looks == 0
    assert [r.kind for r in got] == [
        "model.started",
        "retry",
        "retry",
        "model.ended",
        "run.completed",
    ]
    retries = [r for r in got if isinstance(r, CallRetry)]
    assert [(r.attempt, r.error_type) for r in retries] == [(2, "Boom"), (3, "Boom")]
    assert "secret" not in retries[0].model_dump_json()  # the error's type, never its text
