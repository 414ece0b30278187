"""What a client's message with no task id starts: a task run of the agent (a message that
names no context), or a message in the conversation of the context it names (the context's
thread, started with it, and told first of the task run the context began with, if any).

Either is idempotent by the client's message id: the run's id, or the message's key in its
thread, is derived from it, so a send retried with the same message id starts nothing new.
"""

from __future__ import annotations

import logging

from a2a.utils.errors import InvalidParamsError
from temporalio.client import WorkflowExecutionStatus

from waitstate.a2a import shapes
from waitstate.client import RunNotFound, WaitstateClient, thread_input
from waitstate.schemas.pushes import PushConfig
from waitstate.schemas.run import RunInput

log = logging.getLogger("waitstate.a2a")

MESSAGE_ID_REUSED = (
    "this messageId was sent before with another message: a messageId names one message; give "
    "a new message a new id"
)


async def start_task(
    client: WaitstateClient,
    agent: str,
    caller: str,
    task_id: str,
    text: str,
    push: PushConfig | None = None,
) -> str:
    """Start the task run `task_id` of `agent` on `text`, pushing its changes to `push` if
    given (or find it, started by the same message before): its run's id.

    Raises:
        ClientError: Temporal refused the start.
        InvalidParamsError: the message id was sent before with another message.
    """
    run_id = shapes.run_id_of(caller, agent, task_id)
    given_push = [push] if push is not None else None
    started = await client.start(RunInput(task=text, agent=agent, push=given_push), run_id=run_id)
    if started.existing:
        given = await client.started_input(run_id)
        if given is not None and (given.agent, given.task) != (agent, text):
            raise InvalidParamsError(message=MESSAGE_ID_REUSED)
        log.info("caller %s sent the message of task %s again", caller, task_id)
    else:
        log.info("caller %s started task %s", caller, task_id)
    return run_id


async def send_in_context(
    client: WaitstateClient, agent: str, caller: str, task_id: str, text: str
) -> str:
    """Send `text` to the thread of the task's context (started with it if it never ran, and
    then told first of the context's task run): its run's id.

    Raises:
        ClientError: the thread refused the message, or has closed (ThreadClosed).
    """
    context_id = task_id.partition(".")[0]
    thread_id = shapes.thread_id_of(caller, agent, context_id)
    first = await _earlier(client, agent, caller, context_id, thread_id)
    sent = await client.send_message(
        thread_id,
        first + text,
        key=shapes.message_key(task_id),
        sender=f"a2a:{caller}"[:200],
        start=thread_input(agent=agent),
    )
    again = " again" if sent.accepted.duplicate else ""
    log.info("caller %s sent task %s%s, in context %s", caller, task_id, again, context_id)
    return thread_id


async def _earlier(
    client: WaitstateClient, agent: str, caller: str, context_id: str, thread_id: str
) -> str:
    """What a context's new thread is told first: the task run the context began with and its
    answer, if it completed; nothing for a thread that exists (it remembers)."""
    try:
        await client.describe(thread_id)
        return ""
    except RunNotFound:
        pass
    began = shapes.run_id_of(caller, agent, f"{context_id}.{context_id}")
    try:
        description = await client.describe(began)
    except RunNotFound:
        return ""
    if description.status != WorkflowExecutionStatus.COMPLETED:
        return ""
    given, outcome = await client.started_input(began), await client.outcome(began)
    if given is None or outcome.status != "completed":
        return ""
    return shapes.earlier(given.task, outcome.final_output or "")
