"""A task watched as it changes, for a blocking send, a stream, a cancel: read again and again,
soon at first and then every `LOOK_EVERY`, and at once when a task run ends (its outcome is
awaited beside the looks), until it is final or the time given has passed.

Looks, not the run's own pace: a look is one description of the run (and a query only while it
waits for a person), so a watched task costs Temporal little and no worker anything.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterator
from datetime import timedelta
from typing import Any

from a2a.utils.errors import InternalError

from waitstate.a2a import errors, shapes
from waitstate.a2a.reading import Read, TaskReader
from waitstate.client import ClientError, WaitstateClient
from waitstate.schemas.run import RunState

FIRST_LOOK = timedelta(seconds=0.1)
LOOK_EVERY = timedelta(seconds=2)
MAX_WATCHES = 256  # tasks one process watches at once (streams, blocking sends)


class Watches:
    """The tasks a process watches at once, at most `limit`: a stream, or a blocking send's
    wait, each holds a slot while it watches (a burst of streams cannot make the process look
    at Temporal without bound)."""

    def __init__(self, limit: int = MAX_WATCHES) -> None:
        self._limit, self._held = limit, 0

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold a slot for the block.

        Raises:
            InternalError: every slot is held; the caller reads the task with GetTask.
        """
        if self._held >= self._limit:
            raise InternalError(
                message=f"this server watches {self._limit} tasks at once, its most: read the "
                "task with GetTask, or stream it later"
            )
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1


async def watch(
    client: WaitstateClient,
    reader: TaskReader,
    run_id: str,
    task_id: str,
    within: timedelta,
    history: int | None,
) -> AsyncGenerator[Read]:
    """The task `task_id` (of the run `run_id`), at each look, for `within` or until it is
    final.

    Raises:
        A2AError: the run could not be read (`errors.refusal`).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within.total_seconds()
    ending: asyncio.Task[RunState] | None = None
    if not shapes.in_conversation(task_id):  # a thread does not end with its messages
        ending = asyncio.create_task(client.outcome(run_id))
    pause = FIRST_LOOK.total_seconds()
    try:
        while True:
            try:
                read = await reader.read(client, run_id, task_id, history=history)
            except ClientError as err:
                raise errors.refusal(err, task_id) from err
            yield read
            left = deadline - loop.time()
            if read.state in shapes.FINAL_STATES or left <= 0:
                return
            waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(asyncio.sleep(pause))}
            if ending is not None and not ending.done():
                waits.add(ending)
            done, pending = await asyncio.wait(
                waits, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            for waiting in pending - {ending}:
                waiting.cancel()
            pause = min(2 * pause, LOOK_EVERY.total_seconds())
    finally:
        if ending is not None:
            ending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await ending
