"""A task's cancellation kept through the cleanup under it (waitstate/cancelling.py): awaiting a
child task it cancelled, and an error that replaced the cancellation."""

from __future__ import annotations

import asyncio

import pytest

from waitstate.cancelling import ended, keep_cancellation


async def _stopping(child: asyncio.Task[None], waiting: asyncio.Event) -> None:
    """Cancel `child` and wait for it to end, as the cleanup of a stream or a heartbeat does."""
    child.cancel()
    waiting.set()
    await ended(child)


async def _shielded_child(release: asyncio.Event) -> None:
    """A child task that takes its time to end once cancelled (a process shutting down)."""
    try:
        await asyncio.Event().wait()
    finally:
        await release.wait()


async def test_a_task_cancelled_while_it_waits_for_a_child_it_cancelled_ends_cancelled() -> None:
    release = asyncio.Event()
    child = asyncio.create_task(_shielded_child(release))
    await asyncio.sleep(0)  # the child runs up to its wait
    waiting = asyncio.Event()
    stopping = asyncio.create_task(_stopping(child, waiting))
    await waiting.wait()

    stopping.cancel()
    await asyncio.wait({stopping})
    release.set()
    await asyncio.wait({child})

    assert stopping.cancelled()  # `suppress(CancelledError): await child` returned instead
    assert child.cancelled()


async def test_a_child_s_own_end_is_no_error_and_its_failure_is_told() -> None:
    async def failing() -> None:
        raise ValueError("broken")

    cancelled = asyncio.create_task(asyncio.Event().wait())
    cancelled.cancel()
    failed = asyncio.create_task(failing())

    assert await ended(cancelled) is None
    assert isinstance(await ended(failed), ValueError)


async def test_an_error_that_replaced_the_cancellation_gives_it_back() -> None:
    started = asyncio.Event()

    async def swallowing() -> str:
        try:
            started.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            replaced = ConnectionError("refused")  # what anyio's task group raises instead
        try:
            raise replaced
        except ConnectionError as err:
            keep_cancellation(err)
        return "went on"

    task = asyncio.create_task(swallowing())
    await started.wait()
    task.cancel()
    await asyncio.wait({task})

    assert task.cancelled()


async def test_no_cancellation_no_error() -> None:
    keep_cancellation(ConnectionError("refused"))  # returns: the caller handles its error
    with pytest.raises(ValueError):
        try:
            raise ValueError("broken")
        except ValueError as err:
            keep_cancellation(err)
            raise
