"""Following an MCP server's tasks by its notifications, where it offers them: a
`subscriptions/listen` stream naming the tasks (`notifications.taskIds`, SEP-2663), on which the
server sends `notifications/tasks` as each changes. A poll then waits for the next notification
or its interval, whichever comes first, and reads the task at once (`tasks/get`: the notice only
wakes it, the task is read as ever). A server that serves no such stream, refuses it, or drops it
is polled at its interval, as before: notifications only ever make a poll come sooner.

The SDK opens listen streams only for its base kinds (tools, prompts, resources); this opens one
with the extension's key the same way, through the session's listen routes (which take the
stream's acknowledgment). Should a later SDK move those, `follow` says no and polling goes on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.client.extension import NotificationBinding
from mcp.shared.exceptions import MCPError
from mcp_types import NotificationParams, SubscriptionFilter
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

log = logging.getLogger("waitstate.mcp")

TASK_NOTIFICATION = "notifications/tasks"
TASK_IDS = "taskIds"
ACK_WITHIN_SECONDS = 5.0  # for the server to acknowledge a stream, or polling goes on alone
# Between two reads a notification wakes: a server that sends them without end is read at most
# this often (its poll interval still bounds the wait from above).
MIN_GAP_SECONDS = 0.2
_ids = itertools.count(1)


class TaskNotice(NotificationParams):
    """What a task notification says that wakes a poll: which task (the rest is read anew)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    task_id: str = Field(alias="taskId", max_length=512)


class TaskWatch:
    """The tasks one session follows by notification, and the polls they wake.

    Bound to the session's tasks extension (`binding()`); `follow` opens a stream for a task,
    `wait` sleeps until the task changes or the time is up. `close` forgets the streams (their
    session is being closed with them).
    """

    def __init__(self) -> None:
        self._changed: dict[str, asyncio.Event] = {}
        self._streams: dict[str, _Stream] = {}
        self._refused = False
        self._last_read: dict[str, float] = {}

    def binding(self) -> NotificationBinding[TaskNotice]:
        return NotificationBinding(
            method=TASK_NOTIFICATION, params_type=TaskNotice, handler=self._noticed
        )

    async def _noticed(self, notice: TaskNotice) -> None:
        if (changed := self._changed.get(notice.task_id)) is not None:
            changed.set()  # a task this session does not follow wakes nothing

    async def follow(self, session: Any, task_id: str) -> bool:
        """Open a stream for `task_id` on `session`, unless one is open: whether the server
        sends its changes (it acknowledged the task)."""
        stream = self._streams.get(task_id)
        if stream is not None and stream.route.end is None:
            return True
        if self._refused or session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return False
        self._changed.setdefault(task_id, asyncio.Event())
        try:
            stream = await _listen(session, [task_id])
        except (AttributeError, TypeError) as err:  # the SDK's listen routes moved
            log.warning("task notifications not followed: %s", err)
            self._refused = True
            return False
        honoured = stream.route.honored
        extra = (honoured.model_extra or {}) if honoured is not None else {}
        if task_id not in (extra.get(TASK_IDS) or []):
            # Not served, refused or not acknowledged in time: this session polls.
            stream.end()
            reason = stream.route.error or "the task was not acknowledged"
            log.info("task %s: no notifications (%s): polled", task_id, reason)
            self._refused = True
            return False
        self._streams[task_id] = stream
        return True

    async def wait(self, task_id: str, seconds: float) -> bool:
        """Until `task_id` changes (a notification came), or `seconds` passed: whether it
        changed."""
        started = time.monotonic()
        gap = MIN_GAP_SECONDS - (started - self._last_read.get(task_id, 0.0))
        if gap > 0:
            await asyncio.sleep(min(gap, seconds))
        changed = self._changed.setdefault(task_id, asyncio.Event())
        left = seconds - (time.monotonic() - started)
        try:
            async with asyncio.timeout(max(left, 0.0)):
                await changed.wait()
        except TimeoutError:
            return False
        finally:
            self._last_read[task_id] = time.monotonic()
        changed.clear()
        return True

    def close(self) -> None:
        for stream in self._streams.values():
            stream.end()
        self._streams.clear()


@dataclass
class _Stream:
    route: Any  # the SDK's `ListenRoute`: the acknowledgment, and how the stream ended
    scope: anyio.CancelScope  # the request's, which stays open as long as the stream

    def end(self) -> None:
        self.route.settle("local")
        self.scope.cancel()


async def _listen(session: Any, task_ids: list[str]) -> _Stream:
    """Send `subscriptions/listen` for `task_ids` as the SDK's `listen()` sends its own, and
    wait for its acknowledgment (at most `ACK_WITHIN_SECONDS`): the stream."""
    request_id = f"tasks-listen-{next(_ids)}"
    params = {"notifications": {TASK_IDS: task_ids}}
    data: dict[str, Any] = {"method": "subscriptions/listen", "params": params}
    opts: dict[str, Any] = {"request_id": request_id}
    session._stamp(data, opts)
    route = session._register_listen_route(request_id)
    scope = anyio.CancelScope()

    async def drive() -> None:
        with scope:
            try:
                await session._dispatcher.send_raw_request(data["method"], data.get("params"), opts)
            except MCPError as err:
                route.settle("lost", error=err)
            else:
                route.set_acked(SubscriptionFilter())  # a result is the stream's graceful end
                route.settle("graceful")
            finally:
                session._unregister_listen_route(request_id)

    session._task_group.start_soon(drive)
    with anyio.move_on_after(ACK_WITHIN_SECONDS):
        await route.acked.wait()
    return _Stream(route, scope)
