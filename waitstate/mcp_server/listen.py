"""Task notifications: `notifications/tasks` on a `subscriptions/listen` stream (SEP-2663 over
SEP-2575), so a caller learns that its task changed when it does, not at its next poll.

A caller opens a stream naming the tasks it follows (`notifications.taskIds`); the server
acknowledges those it will report on (its own tasks that exist: another caller's task, or an
unknown one, is left out of the acknowledgment, as `tasks/get` calls it "not found") and sends
each one's full task (what `tasks/get` would answer) at once, then at each change of its status,
its message or what it asks. Changes are not polled for: each task's run history is long-polled
(`growth`), so a notification follows the run's step by the time Temporal takes to append it.
The stream ends, gracefully, once every task it follows has ended (unless it also asked for the
base change notifications, which it keeps until the caller closes it).

Like `tasks/get`, a notification is read from the run: this process keeps nothing, and a stream
cut by a restart is opened again by the caller, who reads its tasks afresh.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import anyio
from fastmcp.server.extensions import read_client_extension_settings
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID
from fastmcp_tasks.models import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    GetTaskResult,
    missing_capability_error_data,
)
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from pydantic import BaseModel

from waitstate.client import ClientError, RunNotFound
from waitstate.client._events import growth
from waitstate.mcp_server import shapes
from waitstate.mcp_server.errors import MAX_TASK_ID_CHARS, refusal
from waitstate.mcp_server.tasks import RunTasks, request_caller

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

log = logging.getLogger("waitstate.mcp_server")

TASK_IDS = "taskIds"  # the extension's key in a listen request's filter, and in its acknowledgment
MAX_STREAMS = 256  # open at once, for the whole process
MAX_TASKS = 64  # that one stream follows
# Between two reads of one task: a run that takes many steps at once is read once for them.
READ_GAP_SECONDS = 0.2
# A task is read at least this often even if its history seems still (its reader stopped, or
# Temporal was unreachable): a late notification, never a lost one.
READ_AT_LEAST_SECONDS = 30.0
ENDED = frozenset({"completed", "failed", "cancelled"})


class TaskNotification(BaseModel):
    """`notifications/tasks`: the task, whole (the extension's `DetailedTask`)."""

    method: str = "notifications/tasks"
    params: dict[str, Any]


class TaskNotices:
    """Serves `subscriptions/listen` for the tasks of `tasks`' callers (register it on the
    server's `subscriptions/listen`)."""

    def __init__(
        self, tasks: RunTasks, *, max_streams: int = MAX_STREAMS, max_tasks: int = MAX_TASKS
    ) -> None:
        self._tasks = tasks
        self._max_streams = max_streams
        self._max_tasks = max_tasks
        self._open = 0

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """One stream: acknowledged, then each followed task's changes, until they all end."""
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        requested = params.notifications
        task_ids = _task_ids(requested, self._max_tasks)
        if task_ids and read_client_extension_settings(ctx, TASKS_EXTENSION_ID) is None:
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"task notifications need the tasks extension ({TASKS_EXTENSION_ID})",
                data=missing_capability_error_data(),
            )
        if self._open >= self._max_streams:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        self._open += 1
        try:
            runs = await self._honoured(request_caller(), task_ids)
            base = _base_kinds(requested)
            meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
            honoured = SubscriptionFilter.model_validate(
                {**base.model_dump(by_alias=True, exclude_none=True), TASK_IDS: list(runs) or None}
            )
            await ctx.session.send_notification(
                SubscriptionsAcknowledgedNotification(
                    params=SubscriptionsAcknowledgedNotificationParams(
                        notifications=honoured, _meta=meta
                    )
                ),
                related_request_id=subscription_id,
            )
            writing = anyio.Lock()

            async def notify(task: GetTaskResult) -> None:
                body = task.model_dump(by_alias=True, mode="json", exclude_none=True)
                body.pop("resultType", None)  # a notification is the task, not a result
                body["_meta"] = meta
                async with writing:
                    await ctx.session.send_notification(
                        TaskNotification(params=body),  # type: ignore[arg-type]
                        related_request_id=subscription_id,
                    )

            async with anyio.create_task_group() as followers:
                for task_id, run_id in runs.items():
                    followers.start_soon(self._follow, task_id, run_id, notify)
            if base != SubscriptionFilter():
                await anyio.sleep_forever()  # kept for the base kinds, until the caller leaves
        finally:
            self._open -= 1
        return SubscriptionsListenResult(_meta=meta)

    async def _honoured(self, caller: str, task_ids: list[str]) -> dict[str, str]:
        """The caller's tasks among `task_ids` that exist, with their runs."""
        runs: dict[str, str] = {}
        for task_id in task_ids:
            run_id = shapes.run_id_of(caller, task_id)
            try:
                await self._tasks.client.describe(run_id)
            except RunNotFound:
                continue
            except ClientError as err:
                raise refusal(err) from err
            runs[task_id] = run_id
        return runs

    async def _follow(self, task_id: str, run_id: str, notify: Any) -> None:
        """Send the task now, then at each change, until it ends."""
        grew = asyncio.Event()
        sent: tuple[Any, ...] | None = None
        async with anyio.create_task_group() as reading:
            reading.start_soon(_grow, self._tasks.client.temporal, run_id, grew)
            while True:
                try:
                    task = await self._tasks.read(run_id, task_id)
                except ClientError as err:
                    log.info("task %s: not read (%s); read again later", task_id, err)
                else:
                    seen = _seen(task)
                    if seen != sent:
                        await notify(task)
                        sent = seen
                    if task.status in ENDED:
                        reading.cancel_scope.cancel()
                        return
                with anyio.move_on_after(READ_AT_LEAST_SECONDS):
                    await grew.wait()
                grew.clear()
                await anyio.sleep(READ_GAP_SECONDS)


async def _grow(temporal: Any, run_id: str, grew: asyncio.Event) -> None:
    """`growth` of the run, started again whenever it stops (its chain ended, or Temporal
    could not be read); the follower reads the task at once each time."""
    while True:
        await growth(temporal, run_id, grew)
        grew.set()
        await anyio.sleep(READ_AT_LEAST_SECONDS)


def _task_ids(requested: SubscriptionFilter, most: int) -> list[str]:
    """The task ids a listen request asks to follow, each once.

    Raises:
        MCPError: `taskIds` is not a list of task ids, or names more than `most`.
    """
    raw = (requested.model_extra or {}).get(TASK_IDS)
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(
        isinstance(t, str) and 0 < len(t) <= MAX_TASK_ID_CHARS for t in raw
    ):
        raise MCPError(INVALID_PARAMS, f"'{TASK_IDS}' is a list of task ids")
    ids = list(dict.fromkeys(raw))
    if len(ids) > most:
        raise MCPError(INVALID_PARAMS, f"a stream follows at most {most} tasks")
    return ids


def _base_kinds(requested: SubscriptionFilter) -> SubscriptionFilter:
    """The base change notifications asked for: honoured, though this server never changes
    its tools, prompts or resources (so none is ever sent). Resource subscriptions are not: it
    has no resource to subscribe to, and does not advertise them (`served`)."""
    return SubscriptionFilter(
        tools_list_changed=True if requested.tools_list_changed else None,
        prompts_list_changed=True if requested.prompts_list_changed else None,
        resources_list_changed=True if requested.resources_list_changed else None,
    )


def _seen(task: GetTaskResult) -> tuple[Any, ...]:
    """What a caller would notice of a task: a notification is sent when it changes."""
    asks = sorted((task.input_requests or {}).keys())
    return task.status, task.status_message, tuple(asks)
