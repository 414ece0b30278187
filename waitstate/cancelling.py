"""A task's cancellation, kept through the code that closes things under it.

Code that runs under `Task.cancel()` (an activity cancelled by its run, or by the worker's
shutdown, which then waits for it) must end with `CancelledError`; a loop that goes on instead
holds the worker's shutdown for ever. Two things lose the error on the way:

- cleanup that suppresses `CancelledError` because the thing it closes or awaits may end with one
  of its own (a child task it cancelled, a session the SDK cancelled);
- anyio's task group (the mcp SDK's sessions are made of them): cancelled while one of its child
  tasks fails, it raises that task's error in an `ExceptionGroup`, and the `CancelledError` is
  gone.

Either way the task still counts the request (`Task.cancelling()`, Python 3.11): only the one
that made a request takes it back (`uncancel()`, as `asyncio.timeout` and anyio's cancel scopes
do for their own), so a count above zero is a cancellation nobody handled.
"""

from __future__ import annotations

import asyncio
from typing import Any


def being_cancelled() -> bool:
    """Whether the current task is being cancelled: a request to cancel it that nobody took
    back. Inside an anyio cancel scope of the task's, the scope's own cancellation counts too
    until the scope is left: ask outside the scopes that may have been cancelled."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def keep_cancellation(err: BaseException | None = None) -> None:
    """Raise `CancelledError` if the current task is being cancelled: `err` itself if it is
    one, else a new one caused by `err` (the error that replaced the cancellation).

    Raises:
        asyncio.CancelledError: the current task is being cancelled.
    """
    if not being_cancelled():
        return
    if isinstance(err, asyncio.CancelledError):
        raise err
    raise asyncio.CancelledError() from err


async def ended(task: asyncio.Future[Any]) -> BaseException | None:
    """Wait for `task` (one the caller cancelled, or told to stop) to end: the error it ended
    with, if any (retrieved, so asyncio logs nothing of it); None if it ended cancelled or
    returned. A cancellation of the caller while it waits propagates, and leaves `task` be
    (`await task` would cancel `task`, and end with its `CancelledError` either way: the caller
    could not tell its own cancellation from the task's)."""
    await asyncio.wait({task})
    return None if task.cancelled() else task.exception()
