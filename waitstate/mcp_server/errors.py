"""The client's errors said in JSON-RPC: the one place the MCP server turns what
`WaitstateClient` raises into the error its caller reads (`refusal`).

A caller is told `INVALID_PARAMS` for what it can change (a task that is not its own or does
not exist, a closed thread, a message the thread refused, an answer that does not fit its
question) and `INTERNAL_ERROR` for what it cannot (Temporal or the run could not be reached,
the start was refused): the message says which, in one line.
"""

from __future__ import annotations

from typing import NoReturn

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from waitstate.client import (
    AnswerRefused,
    ClientError,
    MessageRefused,
    RunNotFound,
    ThreadClosed,
)
from waitstate.schemas.errors import QUESTION_INVALID_ANSWER

# The longest task id a request may name (and an error may repeat).
MAX_TASK_ID_CHARS = 160


def refusal(err: ClientError, *, task_id: str | None = None, thread: str | None = None) -> MCPError:
    """What `err` means to the caller of a request about `task_id` (or to a message to the
    caller's thread `thread`).

    A run that does not exist is the task that does not: an unknown task and another caller's
    get the same answer (`not_found`).
    """
    if isinstance(err, RunNotFound) and task_id is not None:
        return not_found(task_id)
    if isinstance(err, ThreadClosed):
        name = f"the thread {thread!r}" if thread is not None else "the thread"
        return MCPError(
            code=INVALID_PARAMS,
            message=f"{name} is closed: it takes no more messages; name another",
        )
    if isinstance(err, MessageRefused):
        return MCPError(code=INVALID_PARAMS, message=f"the thread refused it: {err.reason}")
    if isinstance(err, AnswerRefused) and err.error_type == QUESTION_INVALID_ANSWER:
        return MCPError(code=INVALID_PARAMS, message=err.reason)
    return MCPError(code=INTERNAL_ERROR, message=str(err))


def is_invalid_answer(err: AnswerRefused) -> bool:
    """Whether a refused answer is the caller's to correct (its content does not fit the
    question), not merely late (already answered, expired, unknown), which `tasks/update`
    ignores."""
    return err.error_type == QUESTION_INVALID_ANSWER


def not_found(task_id: str) -> MCPError:
    """One answer for an unknown task and another caller's: neither says it exists."""
    return MCPError(code=INVALID_PARAMS, message=f"Task {task_id[:MAX_TASK_ID_CHARS]} not found")


def fail(err: ClientError, task_id: str) -> NoReturn:
    """Raise what `err` means to the caller of a request about `task_id`."""
    raise refusal(err, task_id=task_id) from err
