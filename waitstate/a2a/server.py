"""A served agent's A2A methods over waitstate runs (`RunTaskHandler`): `SendMessage` and
`SendStreamingMessage` start a task (a run, or a message in a context's thread), or reply to
what its task asks; `GetTask` reads the run; `CancelTask` cancels it; `SubscribeToTask` streams
it from now; `ListTasks` lists the caller's task runs; the push config methods set, read and
delete a task run's webhooks, which its run pushes each state to (`pushing`).

The run is the task's only state. This process keeps nothing: killed and started again, it
serves every task it created from Temporal, and so does any other copy of it. A task is its
caller's alone (`shapes.run_id_of`): another caller's task id is "task not found", as an unknown
one is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from datetime import timedelta

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    UnsupportedOperationError,
)

from waitstate.a2a import errors, listing, pushing, shapes, starting, watching
from waitstate.a2a.reading import Read, TaskReader
from waitstate.agents import Agent
from waitstate.client import (
    ClientError,
    RunEnded,
    WaitstateClient,
)
from waitstate.outbound import Network
from waitstate.schemas.approvals import ApprovalRequest
from waitstate.schemas.pushes import PushConfigChange

log = logging.getLogger("waitstate.a2a")

# How long a blocking send waits for its task to settle (end, or ask for input) before it
# answers with the task as it stands: the client reads on with GetTask or a subscription.
BLOCKING_WAIT = timedelta(seconds=30)
# How long a stream stays open: a client that wants longer subscribes again.
STREAM_FOR = timedelta(hours=1)
# How long a cancel waits for the run to end, to answer with the canceled task.
CANCEL_WAIT = timedelta(seconds=10)

Connect = Callable[[], Awaitable[WaitstateClient]]


class RunTaskHandler(RequestHandler):
    """The A2A methods of one served agent, `agent`, over the runs `connect`'s client starts
    (connected on first use, once)."""

    def __init__(
        self,
        agent: Agent,
        agents: dict[str, Agent],
        connect: Connect,
        watches: watching.Watches | None = None,
        push_networks: Sequence[Network] = (),
    ) -> None:
        self._agent = agent
        self._push_networks = tuple(push_networks)
        self._watches = watches or watching.Watches()
        self._connect = connect
        self._client: WaitstateClient | None = None
        self._connecting = asyncio.Lock()
        self._reader = TaskReader(agents)

    async def client(self) -> WaitstateClient:
        async with self._connecting:
            if self._client is None:
                try:
                    self._client = await self._connect()
                except ClientError as err:
                    raise InternalError(message=f"cannot reach Temporal: {err}") from err
        return self._client

    # --- message/send, message/stream --------------------------------------------------------

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        caller = _caller(context)
        run_id, task_id, read = await self._take(params, caller)
        if params.configuration.return_immediately or read.state in shapes.SETTLED_STATES:
            return read.task
        configuration = params.configuration
        history = configuration.history_length if configuration.HasField("history_length") else None
        try:
            with self._watches.slot():
                async for read in self._watch(run_id, task_id, BLOCKING_WAIT, history):
                    if read.state in shapes.SETTLED_STATES:
                        break
        except InternalError:  # no slot to wait in: the task as it stands
            pass
        return read.task

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        caller = _caller(context)
        with self._watches.slot():  # refused before anything starts
            run_id, task_id, read = await self._take(params, caller)
            yield read.task
            if read.state in shapes.SETTLED_STATES:
                return
            async for event in self._updates(run_id, task_id, read):
                yield event

    async def _take(self, params: SendMessageRequest, caller: str) -> tuple[str, str, Read]:
        """Start the task the request's message starts (with the push configuration it gives,
        if any), or apply it as the reply to what its task asks: the run's id, the task's, and
        the task as it stands after."""
        message = params.message
        configuration = params.configuration
        push = None
        if configuration.HasField("task_push_notification_config"):
            given = configuration.task_push_notification_config
            push = pushing.config_of(given, self._push_networks)
        try:
            content = shapes.said(message)
        except shapes.Refused as err:
            raise errors.refused(err) from None
        if message.task_id:
            if push is not None:
                raise InvalidParamsError(
                    message="a reply sets no push config: CreateTaskPushNotificationConfig does"
                )
            return await self._reply(message, content, caller)
        if message.context_id and not shapes.CONTEXT.fullmatch(message.context_id):
            raise InvalidParamsError(message="a contextId is 1 to 64 letters, digits, '_' or '-'")
        try:
            text = shapes.task_text(content)
        except shapes.Refused as err:
            raise errors.refused(err) from None
        task_id = shapes.task_id_of(caller, message.context_id, message.message_id)
        client = await self.client()
        agent = self._agent.name
        try:
            if shapes.in_conversation(task_id):
                if push is not None:
                    pushing.for_task_runs(task_id)
                run_id = await starting.send_in_context(client, agent, caller, task_id, text)
            else:
                run_id = await starting.start_task(client, agent, caller, task_id, text, push)
            return run_id, task_id, await self._reader.read(client, run_id, task_id)
        except ClientError as err:
            raise errors.refusal(err, task_id) from err

    async def _reply(
        self, message: Message, content: shapes.Said, caller: str
    ) -> tuple[str, str, Read]:
        """Apply `message` to its task as the reply to the request the task waits on: a
        decision, or an answer, as an Update whose id is derived from the message's (the same
        message sent again is applied once)."""
        task_id = message.task_id
        if message.context_id and message.context_id != shapes.context_of(task_id):
            raise InvalidParamsError(message="the message's contextId is not its task's")
        run_id = self._run_of(caller, task_id)
        client = await self.client()
        update_id = shapes.update_id_of(task_id, caller, message.message_id)
        try:
            read = await self._reader.read(client, run_id, task_id, history=0)
            if await errors.applied_before(client, run_id, update_id):
                # This very message was applied before (its answer was lost): not again, even
                # to a request the task asks since.
                log.info("caller %s sent its reply to task %s again", caller, task_id)
                return run_id, task_id, await self._reader.read(client, run_id, task_id)
            if read.asked is None:
                raise UnsupportedOperationError(
                    message=f"task {task_id[: errors.MAX_TASK_ID_CHARS]} is "
                    f"{_state_name(read.state)}: it takes no message now (it asks nothing); "
                    "a message that starts another task has no taskId"
                )
            if isinstance(read.asked, ApprovalRequest):
                decision = shapes.decision_of(read.asked, content, caller)
                decision.delivery_id = update_id
                await client.decide(run_id, decision, update_id=update_id)
            else:
                answer = shapes.answer_of(read.asked, content, caller)
                answer.delivery_id = update_id
                await client.answer(run_id, answer, update_id=update_id)
            log.info("caller %s replied to task %s", caller, task_id)
            return run_id, task_id, await self._reader.read(client, run_id, task_id)
        except shapes.Refused as err:
            raise errors.refused(err) from None
        except ClientError as err:
            raise errors.refusal(err, task_id) from err

    # --- tasks/* ----------------------------------------------------------------------------

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        run_id = self._run_of(_caller(context), params.id)
        history = params.history_length if params.HasField("history_length") else None
        if history is not None and history < 0:
            raise InvalidParamsError(message="historyLength is 0 or more")
        try:
            return (
                await self._reader.read(await self.client(), run_id, params.id, history=history)
            ).task
        except ClientError as err:
            raise errors.refusal(err, params.id) from err

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        run_id = self._run_of(_caller(context), params.id)
        if shapes.in_conversation(params.id):
            raise errors.not_cancelable(
                params.id,
                "a message in a conversation is not canceled: the conversation "
                "answers it, and takes the next",
            )
        client = await self.client()
        try:
            await client.cancel(run_id)
        except RunEnded as err:
            raise errors.not_cancelable(params.id) from err
        except ClientError as err:
            raise errors.refusal(err, params.id) from err
        log.info("caller %s cancelled task %s", _caller(context), params.id)
        read = None
        async for read in self._watch(run_id, params.id, CANCEL_WAIT, None):
            if read.state in shapes.FINAL_STATES:
                break
        return read.task if read is not None else None

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        task_id = params.id
        run_id = self._run_of(_caller(context), task_id)
        try:
            read = await self._reader.read(await self.client(), run_id, task_id)
        except ClientError as err:
            raise errors.refusal(err, task_id) from err
        if read.state in shapes.FINAL_STATES:
            raise UnsupportedOperationError(
                message=f"task {task_id} has ended: read it with GetTask"
            )
        with self._watches.slot():
            yield read.task
            async for event in self._updates(run_id, task_id, read, until_final=True):
                yield event

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        try:
            return await listing.list_tasks(
                await self.client(), self._reader, _caller(context), params
            )
        except ClientError as err:
            raise errors.refusal(err) from err

    # --- push notifications -------------------------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        run_id = self._run_of(_caller(context), params.task_id)
        pushing.for_task_runs(params.task_id)
        config = pushing.config_of(params, self._push_networks)
        change = PushConfigChange(config=config)
        await pushing.change(await self.client(), run_id, params.task_id, change)
        log.info("caller %s set push config %s of task %s", _caller(context), config.id, run_id)
        return pushing.shown(config, params.task_id)

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        run_id = self._run_of(_caller(context), params.task_id)
        pushing.for_task_runs(params.task_id)
        for config in await pushing.configs(await self.client(), run_id, params.task_id):
            if config.id == params.id:
                return pushing.shown(config, params.task_id)
        raise pushing.not_found(params.id)

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        run_id = self._run_of(_caller(context), params.task_id)
        pushing.for_task_runs(params.task_id)
        configs = await pushing.configs(await self.client(), run_id, params.task_id)
        return ListTaskPushNotificationConfigsResponse(
            configs=[pushing.shown(config, params.task_id) for config in configs]
        )

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        run_id = self._run_of(_caller(context), params.task_id)
        pushing.for_task_runs(params.task_id)
        change = PushConfigChange(delete=params.id)
        await pushing.change(await self.client(), run_id, params.task_id, change)

    # --- what is not served -----------------------------------------------------------------

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError()

    # --- shared -----------------------------------------------------------------------------

    def _run_of(self, caller: str, task_id: str) -> str:
        if (
            not task_id
            or len(task_id) > errors.MAX_TASK_ID_CHARS
            or shapes.context_of(task_id) is None
        ):
            raise errors.not_found(task_id)
        return shapes.run_id_of(caller, self._agent.name, task_id)

    async def _watch(
        self, run_id: str, task_id: str, within: timedelta, history: int | None
    ) -> AsyncGenerator[Read]:
        """The task at each look, for `within` or until it is final (`watching.watch`)."""
        looks = watching.watch(await self.client(), self._reader, run_id, task_id, within, history)
        async with contextlib.aclosing(looks):
            async for read in looks:
                yield read

    async def _updates(
        self, run_id: str, task_id: str, first: Read, *, until_final: bool = False
    ) -> AsyncGenerator[Event]:
        """Status updates of the task as it changes after `first`, and its answer as an
        artifact, until it ends or (unless `until_final`) asks for input."""
        last = _seen(first)
        async for read in self._watch(run_id, task_id, STREAM_FOR, 0):
            if _seen(read) == last:
                continue
            last = _seen(read)
            task = read.task
            for artifact in task.artifacts:
                yield TaskArtifactUpdateEvent(
                    task_id=task_id,
                    context_id=task.context_id,
                    artifact=artifact,
                    last_chunk=True,
                )
            yield TaskStatusUpdateEvent(
                task_id=task_id, context_id=task.context_id, status=task.status
            )
            settled = shapes.FINAL_STATES if until_final else shapes.SETTLED_STATES
            if read.state in settled:
                return


def _seen(read: Read) -> tuple[int, str]:
    """What a stream compares to tell a change: the state, and what its message says."""
    parts = read.task.status.message.parts
    return read.state, parts[0].text if parts else ""


def _state_name(state: int) -> str:
    """A task state as A2A's JSON names it (`TASK_STATE_WORKING`)."""
    return TaskState.Name(state)


def _caller(context: ServerCallContext) -> str:
    """Who sent the request: the caller its bearer key names (`door.CallerAuth`)."""
    user = context.user
    if not user.is_authenticated or not user.user_name:
        raise InvalidRequestError(message="the request is not authenticated")
    return user.user_name
