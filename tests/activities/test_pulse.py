"""Heartbeats of activities that can run long (`activities.pulse`), in an ActivityEnvironment:
a call that waits in silence beats from the side task, repeating the newest details (an earlier
attempt's until this one records its own); a stream's chunks beat at most once per interval;
an activity with no heartbeat timeout gets no side task. And the model activity beats while
its provider holds the call unanswered (real SDK client over HTTP to the wire server).

Nothing here waits for a time to pass: each test waits for the heartbeat it needs (bounded
only against a hang), or moves a clock of its own."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from waitstate.activities import ModelActivities
from waitstate.activities import pulse as pulse_module
from waitstate.activities.pulse import beat, progress, pulse
from waitstate.blobs import LocalBlobStore
from waitstate.schemas import Message, ModelCallInput
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, held
from waitstate.tools import ToolRegistry
from waitstate.worker import build_providers

HANG = 30.0  # only turns a hang into a failure
# A heartbeat timeout short enough for a test's side task to beat at once (every 0.1 s).
SHORT = timedelta(seconds=0.3)


class Beats(list[tuple[Any, ...]]):
    """The heartbeats an ActivityEnvironment saw, and a wait for the next ones."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = asyncio.Event()

    def __call__(self, *details: Any) -> None:
        self.append(details)
        self._changed.set()

    async def until(self, check: Callable[[Beats], bool], what: str) -> None:
        async with asyncio.timeout(HANG):
            while not check(self):
                self._changed.clear()
                await self._changed.wait()
        assert check(self), what


def environment(beats: Beats, heartbeat_timeout: timedelta | None, *details: Any) -> Any:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, heartbeat_timeout=heartbeat_timeout, heartbeat_details=list(details)
    )
    env.on_heartbeat = beats
    return env


async def test_a_call_that_waits_in_silence_beats_from_the_side_task() -> None:
    beats = Beats()

    async def waits() -> None:
        async with pulse():
            await beats.until(lambda b: len(b) >= 2, "two beats while the call waits")

    await environment(beats, SHORT).run(waits)

    assert beats[:2] == [(), ()]


async def test_the_side_task_repeats_the_newest_details_an_earlier_attempts_first() -> None:
    beats = Beats()

    async def records() -> None:
        async with pulse():
            await beats.until(lambda b: len(b) >= 1, "a beat of the earlier attempt's details")
            beat("task", "t-2", 5.0)
            await beats.until(lambda b: len(b) >= 3, "a beat of this attempt's details")

    await environment(beats, SHORT, "sending").run(records)

    assert beats[:3] == [("sending",), ("task", "t-2", 5.0), ("task", "t-2", 5.0)]


async def test_chunks_beat_at_most_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    beats = Beats()
    clock = [1000.0]
    monkeypatch.setattr(pulse_module, "_now", lambda: clock[0])
    seen: list[int] = []

    async def streams() -> None:
        # 30 s: a beat every 10 s of the test's clock; the side task sleeps (real) seconds.
        async with pulse():
            for at in (1.0, 5.0, 9.9, 10.0, 10.1, 15.0, 20.0, 20.5):
                clock[0] = 1000.0 + at
                for _ in range(100):  # many chunks at each moment
                    progress()
                seen.append(len(beats))

    await environment(beats, timedelta(seconds=30)).run(streams)

    assert seen == [0, 0, 0, 1, 1, 1, 2, 2]


async def test_with_no_heartbeat_timeout_nothing_beats_but_what_records_details() -> None:
    beats = Beats()
    tasks: list[int] = []

    async def quiet() -> None:
        before = len(asyncio.all_tasks())
        async with pulse():
            tasks.append(len(asyncio.all_tasks()) - before)
            for _ in range(100):
                progress()
            beat("sending")

    await environment(beats, None).run(quiet)

    assert tasks == [0]  # no side task
    assert beats == [("sending",)]


async def test_the_model_call_beats_while_its_provider_holds_it(
    wire: WireServer, tmp_path: Path
) -> None:
    beats = Beats()
    wire.enqueue_for("held-model", held(HANG))  # answered once another call names the model
    providers = build_providers(
        Settings(openai_base_url=wire.openai_base_url, openai_api_key="test-key")
    )
    activities = ModelActivities(providers, ToolRegistry([]), LocalBlobStore(tmp_path))
    env = environment(beats, SHORT)
    env.info = dataclasses.replace(env.info, start_to_close_timeout=timedelta(seconds=60))
    call = ModelCallInput(
        model="openai:held-model", new_messages=[Message(role="user", content="hello")], tools=[]
    )

    async def release() -> None:
        await beats.until(lambda b: len(b) >= 2, "beats while the call is held")
        async with httpx.AsyncClient() as http:  # the call the held one waits for
            await http.post(
                f"{wire.openai_base_url}/chat/completions",
                json={"model": "held-model", "messages": [{"role": "user", "content": "go"}]},
            )

    try:
        released = asyncio.create_task(release())
        response = await env.run(activities.call_model, call)
        await released
    finally:
        await providers.aclose()

    assert response.message.content == "ok"  # the wire server's default answer
    assert len(beats) >= 2 and all(details == () for details in beats)
