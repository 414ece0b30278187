"""`ListTasks`: a caller's task runs (of any agent served), newest first, read as tasks a page at a time.

The listing is Temporal's (the runs whose ids begin with the caller's digest, and the context's,
if one is named), so it needs no state here; a page token is a place in it (a run's start and
id: the page goes on after it, however many runs began since). A status or a
time filter is applied to the runs as they are read: a page then holds the tasks that pass
among the next runs read (at most `READ_PER_PAGE` times the page's size), and its token goes
on after them. Runs are read newest first, and a page keeps that order. Messages in a context's conversation are the thread's, and not listed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from datetime import UTC

from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState
from a2a.utils.errors import InvalidParamsError

from waitstate.a2a import shapes
from waitstate.a2a.reading import TaskReader
from waitstate.client import RunNotFound, RunSummary, WaitstateClient

DEFAULT_PAGE = 50
MAX_PAGE = 100
MAX_LISTED = 2_000  # runs of one caller a listing goes through, at most
MAX_KEY_CHARS = 300
READ_PER_PAGE = 4  # runs read for a filtered page, per task it may hold
READS_AT_ONCE = 8


async def list_tasks(
    client: WaitstateClient, reader: TaskReader, caller: str, params: ListTasksRequest
) -> ListTasksResponse:
    """A page of `caller`'s task runs, as `params` asks.

    Raises:
        InvalidParamsError: a page size out of 1..100, a negative history length, a context
            that is no context id, a page token of no listing's.
        ClientError: Temporal could not be read.
    """
    size = params.page_size if params.HasField("page_size") else DEFAULT_PAGE
    if not 1 <= size <= MAX_PAGE:
        raise InvalidParamsError(message=f"pageSize is 1 to {MAX_PAGE}")
    history = params.history_length if params.HasField("history_length") else None
    if history is not None and history < 0:
        raise InvalidParamsError(message="historyLength is 0 or more")
    if params.context_id and not shapes.CONTEXT.fullmatch(params.context_id):
        raise InvalidParamsError(message="a contextId is 1 to 64 letters, digits, '_' or '-'")
    after = _key_of(params.page_token)
    prefix = shapes.task_runs_of(caller, params.context_id or None)
    filtered = params.status != TaskState.TASK_STATE_UNSPECIFIED or params.HasField(
        "status_timestamp_after"
    )
    reads = size * READ_PER_PAGE if filtered else size
    # Newest first, by when each began, then by id: an order that runs started since the last
    # page do not shift (they come before it).
    listed = {run.run_id: run for run in await client.list_runs(limit=MAX_LISTED, prefix=prefix)}
    order = sorted(((_key(run), run.run_id) for run in listed.values()), reverse=True)
    following = [(key, run_id) for key, run_id in order if after is None or key < after]
    batch = [run_id for _, run_id in following[:reads]]
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def read(run_id: str) -> Task | None:
        async with gate:
            try:
                found = await reader.read(
                    client, run_id, shapes.task_of_run(run_id), history=history
                )
            except RunNotFound:  # gone since it was listed
                return None
            return found.task

    tasks = [task for task in await asyncio.gather(*map(read, batch)) if task is not None]
    if params.status != TaskState.TASK_STATE_UNSPECIFIED:
        tasks = [task for task in tasks if task.status.state == params.status]
    if params.HasField("status_timestamp_after"):
        since = params.status_timestamp_after.ToDatetime()
        tasks = [task for task in tasks if task.status.timestamp.ToDatetime() > since]
    more = len(following) > len(batch)
    # Unfiltered, Temporal counts the runs; filtered, the total is what passed on this page.
    total = len(tasks) if filtered else await client.count_runs(prefix=prefix)
    return ListTasksResponse(
        tasks=tasks,
        next_page_token=_token(following[len(batch) - 1][0]) if more and batch else "",
        page_size=size,
        total_size=total,
    )


def _key(run: RunSummary) -> str:
    """A run's place in the listing: when it began (UTC, to the microsecond), and its id."""
    began = run.started.astimezone(UTC).strftime("%Y%m%d%H%M%S%f") if run.started else ""
    return f"{began}|{run.run_id}"


def _token(key: str) -> str:
    return base64.urlsafe_b64encode(f"after:{key}".encode()).decode()


def _key_of(token: str) -> str | None:
    """The listing's place a page token names: its pages go on after it."""
    if not token:
        return None
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    tag, _, key = text.partition(":")
    if tag != "after" or not key or len(key) > MAX_KEY_CHARS:
        raise InvalidParamsError(message="pageToken is not one a listing of ours gave")
    return key
