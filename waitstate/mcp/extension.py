"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) as the client declares it:
`Tasks`, which every session that may be answered with a task offers (a stdio server's one
session among them, `waitstate.mcp.servers`), and the tasks a server answers with (`CreatedTask`,
a call it runs as a task; `TaskState`, a `tasks/get` answer). Polling, answering and cancelling
them is `waitstate.mcp.tasks`'s.

Imported only by workers (it needs the `mcp` SDK).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp.client.extension import NotificationBinding
from mcp_types import CallToolResult, Result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

from waitstate.mcp.notices import TaskWatch

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


class _TaskFields(Result):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId")
    status: TaskStatus
    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class CreatedTask(_TaskFields):
    """A `tools/call` the server runs as a task."""

    result_type: Literal["task"] = Field(alias="resultType")


class TaskState(_TaskFields):
    """A `tasks/get` answer: the task, and its result, error or input requests."""

    result_type: Literal["complete"] = Field(alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, alias="inputRequests")


async def _not_here(task: CreatedTask, context: ClaimContext) -> CallToolResult:
    # Calls are made with allow_claimed=True: the run, not the SDK, waits for the task.
    raise RuntimeError(f"task {task.task_id} is the run's to wait for")


class Tasks(ClientExtension):
    """Tells the server this client drives tasks itself (it may then answer with one); with a
    `watch`, the session takes the server's task notifications to it."""

    identifier = TASKS_EXTENSION

    def __init__(self, watch: TaskWatch | None = None) -> None:
        self._watch = watch

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return () if self._watch is None else (self._watch.binding(),)

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (
            ResultClaim(
                result_type="task",
                model=CreatedTask,
                resolve=_not_here,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            ),
        )
