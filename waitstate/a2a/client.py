"""A remote A2A agent as a long tool: `A2AAgent(url, name=..., description=...)`.

A call of the tool is an operation whose job is a task of the remote agent. Its start sends the
call's arguments as a message (`SendMessage`, returning at once), with a push config whose URL is
the operation's on our gateway (`/v1/operations/{id}/a2a`) and whose token is the operation's
resume token; the gateway takes the remote's pushes as the complete endpoint takes a job's
webhook. Its status check is `GetTask` (every `reconcile_every`, so a run whose pushes never
come still ends), its cancel `CancelTask`, and an answer to its `input-required` a message on
the same task. The remote's answers are read by the mapping the gateway uses
(`waitstate.schemas.a2a_tasks`), bounded in size, each call bounded in time.

Needs the a2a SDK (`pip install 'waitstate[a2a]'`): only workers import this module.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import httpx
from a2a.client import A2ACardResolver, A2AClientError, Client, ClientConfig, ClientFactory
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError, TaskNotCancelableError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict
from pydantic import BaseModel, Field, ValidationError

from waitstate.schemas.a2a_tasks import A2ATask, state_name, task_report
from waitstate.schemas.operations import Completion, ResultMode
from waitstate.schemas.questions import QuestionPolicy
from waitstate.tools.spec import (
    DEFAULT_RECONCILE_EVERY,
    Job,
    JobAnswer,
    LongSpec,
    StartContext,
    ToolError,
    ToolSpec,
)

# Each call to the remote, and the most of its answer read: a remote is outside our control.
REQUEST_TIMEOUT = timedelta(seconds=10)
MAX_RESPONSE_BYTES = 1_000_000
TRANSPORTS = ["JSONRPC", "HTTP+JSON"]
# Start keys become context ids under this namespace: a retried start finds its task.
_CONTEXTS = uuid.UUID("6f1c2d3e-a2a0-4c1e-9a2a-7761697473a1")


class A2AMessageArgs(BaseModel):
    """What the model sends a remote agent, unless the tool declares its own arguments."""

    message: str = Field(
        min_length=1, max_length=20_000, description="What to ask the agent, in words."
    )


class ResponseTooLarge(Exception):
    """The remote's answer is over MAX_RESPONSE_BYTES."""


class _Bounded(httpx.AsyncBaseTransport):
    """Reads each answer up to a limit (a Content-Length says nothing of a chunked body)."""

    def __init__(self, limit: int) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        body = bytearray()
        try:
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > self._limit:
                    raise ResponseTooLarge(f"the agent's answer is over {self._limit} bytes")
        finally:
            await response.aclose()
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=bytes(body),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class A2ABackend:
    """Starts, checks, answers and cancels tasks of one remote A2A agent (a `LongTool` that
    answers questions).

    Args:
        url: The agent's base URL (its card is at `/.well-known/agent-card.json`).
        headers: Sent with every request (credentials the agent asks for).
        request_timeout: Each request's bound.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        request_timeout: timedelta = REQUEST_TIMEOUT,
    ) -> None:
        self.url = url.rstrip("/")
        self._headers = dict(headers or {})
        self._timeout = request_timeout.total_seconds()
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None
        self._pushes = False
        self._lock = asyncio.Lock()

    async def _connected(self) -> Client:
        """The SDK's client, made on first use from the agent's card (read once)."""
        async with self._lock:
            if self._client is None:
                # Uncompressed: the bound is on what is read, and a small gzip body can unpack
                # to gigabytes.
                self._http = httpx.AsyncClient(
                    headers={**self._headers, "Accept-Encoding": "identity"},
                    timeout=self._timeout,
                    transport=_Bounded(MAX_RESPONSE_BYTES),
                )
                config = ClientConfig(
                    streaming=False,
                    httpx_client=self._http,
                    supported_protocol_bindings=TRANSPORTS,
                )
                card = await _call(A2ACardResolver(self._http, self.url).get_agent_card())
                client = ClientFactory(config).create(card)
                self._pushes = card.capabilities.push_notifications
                self._client = client
            return self._client

    async def aclose(self) -> None:
        """Close the connection to the agent (a worker's shutdown)."""
        if self._http is not None:
            await self._http.aclose()
        self._http, self._client = None, None

    async def start(self, args: BaseModel, context: StartContext) -> Job:
        """Send the call as a message; the task the agent makes is the job. A retried start
        finds the task its first attempt made (by the context id its key names).

        Raises:
            ToolError: the agent refused the message, or answered without a task.
        """
        client = await self._connected()
        context_id = str(uuid.uuid5(_CONTEXTS, context.idempotency_key))
        if (found := await self._started(client, context_id)) is not None:
            return Job(job_id=found)
        configuration = SendMessageConfiguration(return_immediately=True)
        if self._pushes and context.callback_url and context.callback_token:
            token = context.callback_token
            configuration.task_push_notification_config.CopyFrom(
                TaskPushNotificationConfig(
                    url=push_url(context.callback_url),
                    token=token,
                    authentication=AuthenticationInfo(scheme="Bearer", credentials=token),
                )
            )
        message = Message(
            role=Role.ROLE_USER,
            message_id=context_id,
            context_id=context_id,
            parts=_parts(args),
        )
        request = SendMessageRequest(message=message, configuration=configuration)
        async for response in _stream(client.send_message(request)):
            if response.HasField("task"):
                return Job(job_id=response.task.id)
            said = " ".join(part.text for part in response.message.parts if part.text)
            raise ToolError(f"the agent answered at once, without a task to follow: {said[:2_000]}")
        raise ToolError("the agent answered nothing")

    async def _started(self, client: Client, context_id: str) -> str | None:
        """The task an earlier attempt of this start made, if the agent lists it."""
        try:
            listed = await _call(
                client.list_tasks(ListTasksRequest(context_id=context_id, page_size=1))
            )
        except ToolError:
            return None  # an agent that lists no tasks: the start is sent once more
        return listed.tasks[0].id if listed.tasks else None

    async def status(self, job_id: str) -> Completion:
        """The task's state as a report; a task the agent does not know has failed."""
        task = await self._task(job_id)
        if task is None:
            return Completion.failed(
                "job_unknown",
                f"the agent no longer knows task {job_id}; call it again",
                retryable=True,
            )
        report = task_report(task.status.state, task.status.message, task.artifacts)
        return report or Completion(status="running", progress=task.status.state.lower())

    async def _task(self, job_id: str) -> A2ATask | None:
        client = await self._connected()
        try:
            task: Task = await _call(client.get_task(GetTaskRequest(id=job_id)))
        except _Unknown:
            return None
        try:
            return A2ATask.model_validate(MessageToDict(task))
        except ValidationError as err:
            raise ToolError(
                f"the agent's task is not one we can read: {err.error_count()} problems"
            ) from None

    async def cancel(self, job_id: str) -> None:
        """Cancel the task; one that has ended or that the agent does not know is left be."""
        client = await self._connected()
        try:
            await _call(client.cancel_task(CancelTaskRequest(id=job_id)))
        except _Unknown:
            return

    async def answer(self, job_id: str, answer: JobAnswer) -> None:
        """Answer the task's question with a message on the task, unless it no longer asks
        it (the first delivery of this answer was taken: it is not sent twice).

        Raises:
            ToolError: the agent refused the message, or does not know the task.
        """
        task = await self._task(job_id)
        if task is None:
            raise ToolError(f"the agent no longer knows task {job_id}")
        asking = task.status.message.message_id if task.status.message else None
        if state_name(task.status.state) != "INPUT_REQUIRED" or (asking or "input") != answer.key:
            return  # answered already (or it asks another question now)
        client = await self._connected()
        content = answer.content or {}
        if answer.action == "decline":
            parts = [Part(text=f"(no answer: {answer.reason or 'declined'})")]
        elif isinstance(content.get("answer"), str) and len(content) == 1:
            parts = [Part(text=content["answer"])]
        else:
            parts = _parts_of(content)
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid5(_CONTEXTS, f"{job_id}/{answer.key}")),
            task_id=job_id,
            parts=parts,
        )
        request = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        async for _ in _stream(client.send_message(request)):
            return


class _Unknown(ToolError):
    """The agent does not know the task, or it can no longer be changed."""


async def _call(awaitable: Any) -> Any:
    """The SDK's answer, its errors said as ours: a refusal by the agent is final (ToolError);
    a network error, a timeout or a 5xx propagates, for the activity's retry."""
    try:
        return await awaitable
    except (TaskNotFoundError, TaskNotCancelableError) as err:
        raise _Unknown(f"the agent: {err}") from None
    except ResponseTooLarge as err:
        raise ToolError(str(err)) from None
    except A2AClientError:
        raise
    except A2AError as err:
        raise ToolError(f"the agent refused: {type(err).__name__}: {str(err)[:500]}") from None


async def _stream(responses: Any) -> Any:
    """`_call` over each answer of a stream."""
    iterator = responses.__aiter__()
    while True:
        try:
            yield await _call(iterator.__anext__())
        except StopAsyncIteration:
            return


def push_url(callback_url: str) -> str:
    """The operation's push URL on the gateway, beside its complete endpoint."""
    return callback_url.removesuffix("/complete") + "/a2a"


def _parts(args: BaseModel) -> list[Part]:
    if isinstance(args, A2AMessageArgs):
        return [Part(text=args.message)]
    return _parts_of(args.model_dump(mode="json"))


def _parts_of(content: dict[str, Any]) -> list[Part]:
    part = Part()
    part.data.struct_value.update(content)
    return [part]


def A2AAgent(  # noqa: N802 (a tool declared as a class would be: it reads as one in an app)
    url: str,
    *,
    name: str,
    description: str,
    args: type[BaseModel] = A2AMessageArgs,
    headers: Mapping[str, str] | None = None,
    mode: ResultMode = "await",
    timeout: timedelta = timedelta(hours=1),
    reconcile_every: timedelta | None = DEFAULT_RECONCILE_EVERY,
    input: QuestionPolicy | None = None,
    max_in_flight: int | None = None,
    eta: timedelta | None = None,
    request_timeout: timedelta = REQUEST_TIMEOUT,
) -> ToolSpec:
    """A remote A2A agent as a long tool: each call a task of the agent, woken by its push.

    Args:
        url: The agent's base URL.
        name: The tool's name, as the model calls it.
        description: What the model reads to decide when to call it.
        args: The arguments' model: `A2AMessageArgs` (one `message`, sent as text), or a model
            of your own (sent as one data part).
        headers: Sent with every request to the agent (its credentials).
        mode: `await` (the task's result is the tool's) or `handle`.
        timeout: After this the task is cancelled at the agent and the operation expires.
        reconcile_every: How often the task is read (`GetTask`) in case its push was lost or
            the agent sends none; at least a second.
        input: Who answers the agent's `input-required` (default: a person).
        max_in_flight: Tasks of this agent one run may have at once.
        eta: A hint for the model of how long the agent takes.
        request_timeout: Each request to the agent's bound.
    """
    backend = A2ABackend(url, headers=headers, request_timeout=request_timeout)
    return ToolSpec(
        name=name,
        description=description,
        args=args,
        long=LongSpec(
            backend=backend,
            completion="callback",
            mode=mode,
            timeout=timeout,
            max_in_flight=max_in_flight,
            eta=eta,
            input=input or QuestionPolicy(),
            reconcile_every=reconcile_every,
        ),
    )
