"""The client's errors said in A2A: the one place the A2A server turns what `WaitstateClient`
raises into the JSON-RPC error its caller reads (`refusal`).

A caller is told invalid params for what it can change (a message the task cannot take, an
answer that does not fit its question), "task not found" for a task that is not its own or does
not exist (the same answer for both), and an internal error for what it cannot change (Temporal
or the run could not be reached): the message says which, in one line.
"""

from __future__ import annotations

from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
)

from waitstate.a2a import shapes
from waitstate.client import (
    AlreadyApplied,
    ClientError,
    MessageRefused,
    OutcomeUnknown,
    RunEnded,
    RunNotFound,
    StartFailed,
    ThreadClosed,
    UpdateNotFound,
    UpdateRefused,
    WaitstateClient,
)
from waitstate.schemas.errors import PUSH_CONFIG_REFUSED

MAX_TASK_ID_CHARS = 160


def refusal(err: ClientError, task_id: str | None = None) -> A2AError:
    """What `err` means to the caller of a request about `task_id`."""
    if isinstance(err, RunNotFound):
        return not_found(task_id or "")
    if isinstance(err, RunEnded):
        return InvalidParamsError(
            message=f"task {_shown(task_id)} has ended: it takes nothing more"
        )
    if isinstance(err, ThreadClosed):
        return InvalidParamsError(
            message="this context's conversation has closed: it takes no more messages; start "
            "another context"
        )
    if isinstance(err, MessageRefused):
        return InvalidParamsError(message=f"the conversation refused the message: {err.reason}")
    if isinstance(err, UpdateRefused) and err.error_type == PUSH_CONFIG_REFUSED:
        return InvalidParamsError(message=f"push notification config refused: {err.reason}")
    if isinstance(err, UpdateRefused):
        return InvalidParamsError(message=f"the task refused the reply: {err.reason}")
    if isinstance(err, AlreadyApplied):
        return InvalidParamsError(message="another reply was applied first: this one was not")
    if isinstance(err, OutcomeUnknown):
        return InternalError(
            message="the run did not answer in time: send the same message again (same "
            "messageId) to learn what became of it"
        )
    if isinstance(err, StartFailed):
        return InternalError(message=f"the task could not be started: {err}")
    return InternalError(message=str(err))


def not_found(task_id: str) -> A2AError:
    """One answer for an unknown task and another caller's: neither says it exists."""
    return TaskNotFoundError(message=f"task {_shown(task_id)} not found")


def not_cancelable(task_id: str, why: str = "it has ended") -> A2AError:
    """A task that has ended (or is a message in a conversation) is not canceled."""
    return TaskNotCancelableError(message=f"task {_shown(task_id)} is not canceled: {why}")


def refused(err: shapes.Refused) -> A2AError:
    """A message that cannot apply, as the caller reads it."""
    return InvalidParamsError(message=str(err))


def _shown(task_id: str | None) -> str:
    return (task_id or "")[:MAX_TASK_ID_CHARS]


async def applied_before(client: WaitstateClient, run_id: str, update_id: str) -> bool:
    """Whether the run took the Update `update_id` in before (applied it, or refused it after
    its validator let it in): a message sent again, not to be applied again, even to a request
    the task asks since.

    Raises:
        ClientError: Temporal could not be read.
    """
    try:
        await client.recall(run_id, update_id, dict)
    except UpdateNotFound:
        return False
    except (OutcomeUnknown, UpdateRefused):
        return True
    return True
