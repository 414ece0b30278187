"""Agents served to AG-UI clients: a thread of an agent, run by run, as AG-UI events.

    POST /agui/agents/{agent}        Authorization: Bearer <operator key, or the thread's token>
                                     (a resume: an operator key)
    {RunAgentInput}                  (Last-Event-ID: <id>: a reconnect, after that event)

`threadId` names a waitstate thread of the agent (started by its first message). A run either
brings the person's new message (the last of `messages`, sent once: its id is its key in the
thread), or answers the interrupts the thread's previous run ended with (`resume`): each entry
is a decision or an answer sent under an Update id derived from the thread, the interrupt and
its status, so copies of a resume apply once; a resume of an interrupt another run resumed
already is refused, 409 `duplicate_decision` (or `duplicate_answer`). The response streams the
run's events (`waitstate.agui.mapping`) until the thread has answered the message (RUN_FINISHED
with the answer), waits for a person (RUN_FINISHED with the interrupts), or ends (RUN_ERROR).
An input with neither (no new message of the person's last, no resume) follows the AG-UI run
`runId` of the thread again, found by its id. `threadId` may name a task run of the agent
instead: such an input follows it from its start, and resumes answer its interrupts.

The same input sent again (a client that lost its connection) is the same run: nothing is sent
twice, and the stream starts again where the run began, or after `Last-Event-ID`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated

from ag_ui.core import BaseEvent
from fastapi import APIRouter, Header, Request
from fastapi.responses import Response, StreamingResponse

from waitstate import names
from waitstate.agui import history, inputs, mapping
from waitstate.client import (
    BadPosition,
    ClientError,
    Position,
    RunEvent,
    RunNotFound,
    WaitstateClient,
    refuse_copy,
    thread_input,
)
from waitstate.gateway.delivery import refusal
from waitstate.gateway.gate import GateDep
from waitstate.gateway.refusals import Refused, error_responses, verified
from waitstate.gateway.routes.events import END, feeding
from waitstate.gateway.routes.threads import OperatorCredentials
from waitstate.gateway.streams import Ephemeral, EventDesk, ModelDelta, Read
from waitstate.gateway.threads import MAX_AGENT_CHARS, ThreadDesk
from waitstate.schemas import RunState
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.threads import ThreadMessage

AGUI_PATH = "/agui/agents/{agent}"
# Run events after which the thread's state is read, to tell whether the AG-UI run is over.
_LOOKS = frozenset({"status", "run.completed"})
_WAITING_FOR_PEOPLE = ("approval", "input")
_MESSAGE_ENDS = ("interrupted", "max_turns", "failed")
# How long a reconnect's replay up to its Last-Event-ID may take (it reads history only).
REPLAY_SECONDS = 20.0

log = logging.getLogger("waitstate.gateway.agui")
router = APIRouter(tags=["agui"])


def _desks(gate: GateDep) -> tuple[ThreadDesk, EventDesk]:
    if gate.threads is None or gate.events is None:
        raise Refused(404, "agui_disabled", "this gateway serves no AG-UI agents")
    if not gate.threads.operators.configured:
        raise Refused(
            404,
            "agui_disabled",
            "this gateway serves no AG-UI agents: no operator key is configured "
            "(WAITSTATE_OPERATOR_KEYS)",
        )
    return gate.threads, gate.events


@router.post(
    AGUI_PATH,
    response_class=StreamingResponse,
    operation_id="agui_run",
    summary="Run an agent's thread for an AG-UI client",
    description="A `RunAgentInput`: the person's new message to the thread `threadId`, or the "
    "answers (`resume`) to the interrupts its previous run ended with. The response is the "
    "run's AG-UI events as server-sent events, until it finishes, pauses on a person "
    "(RUN_FINISHED with interrupts) or fails (RUN_ERROR).",
    responses={
        200: {"description": "The run's AG-UI events, as `text/event-stream`."},
        204: {"description": "Reconnected after the run's end: nothing more to come."},
        **error_responses(
            {
                400: "`Last-Event-ID` is no event of this run (`bad_position`), or the body "
                "was cut short.",
                401: "Missing or wrong credential: an operator key, or the thread's token.",
                403: "`decision_not_allowed`: a resume with a thread token (it talks, it does "
                "not decide).",
                404: "`agui_disabled` (no thread or event desk, or no operator key); "
                "`unknown_thread`: a resume or a follow of a thread that never ran; "
                "`unknown_run`: a follow of a run the thread does not have; `unknown_agent`.",
                409: "`wrong_agent`: the thread is another agent's; `duplicate_decision`, "
                "`duplicate_answer`: another run resumed this interrupt already; or the "
                "interrupt is closed.",
                410: "The thread has closed, or the token expired.",
                422: "Not a RunAgentInput, or one out of bounds (`invalid_input`); an answer "
                "that does not fit its question (`invalid_answer`).",
                503: "Temporal or the thread could not be reached: nothing was sent.",
            }
        ),
    },
    # The AG-UI protocol's own type, by its schema's address: its definitions' names (Message,
    # Tool, ToolCall...) would collide with the gateway's own in the document's components.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "description": "An AG-UI RunAgentInput (protocol 1.0).",
                        "required": ["threadId", "runId", "messages"],
                    }
                }
            },
        }
    },
)
async def agui_run(
    agent: str,
    request: Request,
    gate: GateDep,
    credentials: OperatorCredentials,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    threads, desk = _desks(gate)
    if len(agent) > MAX_AGENT_CHARS or not agent.isprintable():
        raise Refused(404, "unknown_agent", "no agent has so long a name")
    body = await gate.read_body(request)
    if credentials is None:
        raise Refused(401, "missing_token", "send Authorization: Bearer <operator key or token>")
    operator = threads.operators.identify(credentials.credentials)
    try:
        given = inputs.parse(body)
        reviewer = f"agui:{operator}" if operator else "agui:thread"
        ask = inputs.asked(given, reviewer)
    except inputs.BadInput as err:
        raise Refused(422, "invalid_input", str(err)) from None
    if operator is None:
        claims = verified(gate.tokens.verify_thread, credentials.credentials)
        if claims.thread_id != ask.thread_id:
            raise Refused(401, "wrong_thread", "token was issued for another thread")
        if ask.resumes:
            # The person talking is not who approves: a refund's requester must not sign it off.
            raise Refused(
                403,
                "decision_not_allowed",
                "a thread token talks in its thread: its requests are decided with an operator "
                "key, or through their own links",
            )
    try:
        after = Position.parse(last_event_id) if last_event_id else None
    except BadPosition as err:
        raise Refused(400, "bad_position", str(err)) from None
    if desk.open_streams >= desk.max_streams:
        raise Refused(503, "too_many_streams", "the gateway holds as many streams as it may")
    client = threads.client
    served = await _served(client, ask.thread_id, agent)
    if ask.text is not None:
        if served is False:
            raise Refused(
                409, "not_a_thread", f"{ask.thread_id} is a task run: it takes no message"
            )
        start, watch = await _send(threads, ask, agent)
    elif served is None:
        raise Refused(404, "unknown_thread", f"no thread or run {ask.thread_id}")
    elif ask.resumes:
        start, watch = await _resume(client, ask)
    elif served:  # an AG-UI run of the thread's, followed again by its id
        start, watch = await _connect(client, ask)
    else:  # a task run, followed from its start
        start, watch = Position((await _read(client, ask.thread_id)).run, 0), ""
    gate.delivered(
        "agui_run", "AG-UI run %s of thread %s (agent %r)", ask.run_id, ask.thread_id, agent
    )
    items = desk.feeds.read(ask.thread_id, start)
    telling = mapping.Telling(ask.thread_id, ask.run_id)
    told = _Run(desk, client, telling, watch, items)
    if after is not None and not await told.replay(after):
        if isinstance(items, AsyncGenerator):
            await items.aclose()  # the feed lets its reader go
        return Response(status_code=204)  # it had the run's end: nothing more to come
    return StreamingResponse(
        told.stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _served(client: WaitstateClient, thread_id: str, agent: str) -> bool | None:
    """Whether `thread_id` is a thread (True) or a task run (False) of `agent`, from what it
    was started with (no worker needed); None if it never ran.

    Raises:
        Refused: 409 `wrong_agent`, it is another agent's; 503 Temporal could not be reached.
    """
    try:
        given = await client.started_input(thread_id)
    except RunNotFound:
        return None
    except ClientError as err:
        raise refusal(err, thread_id=thread_id) from err
    if given is None or given.agent != agent:
        raise Refused(409, "wrong_agent", f"{thread_id} is not a thread or run of {agent!r}")
    return given.thread is not None


async def _send(threads: ThreadDesk, ask: inputs.Asked, agent: str) -> tuple[Position, str]:
    """Send the person's message (once: its key), and where its run's events start."""
    assert ask.text is not None and ask.key is not None
    try:
        sent = await threads.client.send_message(
            ask.thread_id,
            ask.text,
            key=ask.key,
            sender=inputs.SENDER + ask.run_id,
            start=thread_input(agent=agent),
            answer_within=threads.answer_within,
        )
    except ClientError as err:
        raise refusal(err, thread_id=ask.thread_id) from err
    read = await _read(threads.client, ask.thread_id)
    accepted = read.sends.get(ask.key)
    return _before(read, accepted), sent.accepted.message_id


async def _resume(client: WaitstateClient, ask: inputs.Asked) -> tuple[Position, str]:
    """Send each resume's decision or answer (once: its Update id), and where the run's events
    start: at the first one's."""
    state = await _state(client, ask.thread_id)
    working = (
        [m for m in state.thread.messages if m.status == "working"]
        if state and state.thread
        else []
    )
    watch = working[0].message_id if working else ""
    try:
        for resume in ask.resumes:
            if isinstance(resume.reply, DecideInput):
                decided = await client.decide(
                    ask.thread_id, resume.reply, update_id=resume.update_id
                )
                applied, reason = decided.accepted, decided.reason
            else:
                answered = await client.answer(
                    ask.thread_id, resume.reply, update_id=resume.update_id
                )
                # The client tells an answer's copies their outcome; a resume by another AG-UI
                # run is refused as a decision's copy is.
                refuse_copy(ask.thread_id, "answer", resume.reply.delivery_id, answered.delivery_id)
                applied, reason = answered.accepted, answered.reason
            if not applied:  # recorded, not applied: e.g. its window had passed
                raise Refused(409, "not_applied", f"{resume.interrupt_id}: {reason}"[:500])
    except ClientError as err:
        raise refusal(err) from err
    read = await _read(client, ask.thread_id)
    return _before(read, read.updates.get(ask.resumes[0].update_id)), watch


async def _connect(client: WaitstateClient, ask: inputs.Asked) -> tuple[Position, str]:
    """Where an AG-UI run of the thread began, found by its id: its message (its sender names
    the run) or its first resume (its delivery id is the run's).

    Raises:
        Refused: 404 `unknown_run`, the thread's current history has no run of that id.
    """
    read = await _read(client, ask.thread_id)
    sender = inputs.SENDER + ask.run_id
    began = read.senders.get(sender) or read.deliveries.get(mapping.delivery_of(ask.run_id))
    if began is None:
        raise Refused(
            404,
            "unknown_run",
            f"thread {ask.thread_id} has no run {ask.run_id}: a run brings a message (the last "
            "of `messages`, the person's) or resumes",
        )
    state = await _state(client, ask.thread_id)
    messages = state.thread.messages if state is not None and state.thread is not None else []
    mine = [m for m in messages if m.sender == sender] or messages[-1:]
    return _before(read, began), mine[0].message_id if mine else ""


async def _read(client: WaitstateClient, thread_id: str) -> history.RunRead:
    read = await history.read_run(client.temporal, thread_id)
    if read is None:
        raise Refused(503, "temporal_unavailable", "the thread's history could not be read")
    return read


def _before(read: history.RunRead, event_id: int | None) -> Position:
    """Just before `event_id` of the run `read`; its end if the event is not there (the
    thread went on in a new run since)."""
    return Position(read.run, read.length if event_id is None else event_id - 1)


@dataclass
class _Run:
    """One connection's telling of an AG-UI run: its events, read once from the thread's feed,
    told as AG-UI events, with the history facts read so far."""

    desk: EventDesk
    client: WaitstateClient
    telling: mapping.Telling
    watch: str  # the thread's message whose end without an answer ends the run ("": none)
    items: AsyncIterator[Read]
    reads: dict[str, history.RunRead] = field(default_factory=dict)
    held: RunEvent | None = None  # read by the replay, not told yet

    async def tell(self, event: RunEvent) -> list[BaseEvent]:
        """What `event` is told as, with the run's end if it ends it."""
        thread_id = self.telling.thread_id
        told = self.telling.event(event, await _facts(self.client, thread_id, event, self.reads))
        if not self.telling.finished:
            told += await _end(self.client, self.telling, event, self.reads, self.watch)
        return told

    async def replay(self, after: Position) -> bool:
        """Tell the run silently up to the event `after` (a reconnect's `Last-Event-ID`), as
        the reader's earlier connection did; whether the run goes on after it.

        Raises:
            Refused: 400 `bad_position`, `after` is no event of this run.
        """
        try:
            async with asyncio.timeout(REPLAY_SECONDS):
                async for item in self.items:
                    if isinstance(item, Ephemeral):
                        continue
                    run, _, number = item.id.rpartition(".")
                    if run == after.run and int(number) > after.event_id:
                        self.held = item  # past it: the reader never had this one
                        break
                    await self.tell(item)
                    if self.telling.finished or item.id == f"{after.run}.{after.event_id}":
                        break
        except TimeoutError:
            raise Refused(400, "bad_position", "Last-Event-ID is no event of this run") from None
        self.telling.forget()  # what the earlier connection opened is not this one's to close
        return not self.telling.finished

    async def stream(self) -> AsyncIterator[str]:
        """The run's AG-UI events as SSE text, a keepalive comment when nothing came for
        `KEEPALIVE_SECONDS`; ends with the run's end, or when the gateway stops."""
        telling = self.telling
        async with feeding(self.desk, self.items) as taken:
            yield _told(telling.started(), None)
            if self.held is not None:
                yield _told(await self.tell(self.held), self.held.id)
            if telling.finished:
                return
            async for item in taken:
                if item is END:
                    yield _told(telling.error("the thread's events ended", "stream_ended"), None)
                    return
                if isinstance(item, str):
                    yield item
                elif isinstance(item, ModelDelta):
                    yield _told(telling.delta(item.call, item.text), None)
                elif isinstance(item, RunEvent):
                    yield _told(await self.tell(item), item.id)
                if telling.finished:
                    return


def _told(events: list[BaseEvent], event_id: str | None) -> str:
    """The SSE text of `events`, the last carrying `event_id` (where a reader resumes)."""
    last = len(events) - 1
    return "".join(mapping.sse(e, event_id if i == last else None) for i, e in enumerate(events))


async def _facts(
    client: WaitstateClient, thread_id: str, event: RunEvent, reads: dict[str, history.RunRead]
) -> history.RunRead | None:
    """The history facts a model or tool call's end needs: read again when the event is past
    what was read (history only grows)."""
    if event.kind not in ("model.ended", "tool.ended"):
        return None
    run, _, number = event.id.rpartition(".")
    read = reads.get(run)
    if read is None or int(number) > read.length:
        fresh = await history.read_run(client.temporal, thread_id, run)
        if fresh is not None:
            reads[run] = read = fresh
    return read


async def _end(
    client: WaitstateClient,
    telling: mapping.Telling,
    event: RunEvent,
    reads: dict[str, history.RunRead],
    watch: str,
) -> list[BaseEvent]:
    """The run's end, if `event` ends it: an answer (a model reply with no tool calls: for a
    thread, to the message the run is about), a wait for a person (its interrupts), or the
    message ended without an answer."""
    answer: str | None = None
    if event.kind == "model.ended":
        run, _, number = event.id.rpartition(".")
        read = reads.get(run)
        reply = read.replies.get(int(number)) if read is not None else None
        if reply is None or reply.tool_calls:
            return []
        answer = reply.content
        telling.answered = True
    elif event.kind not in _LOOKS:
        return []
    state = await _state(client, telling.thread_id)
    if state is None:
        return [] if answer is None else telling.succeeded(None, answer)
    waiting = event.detail.get(names.WAITING_FOR.name)
    if event.kind == "status" and waiting in _WAITING_FOR_PEOPLE:
        return telling.interrupted(state)
    if event.kind == "run.completed":
        return telling.succeeded(state, state.final_output)
    message = _message(state, watch)
    if message is None:  # a task run's answer; a thread's with no message to watch
        return [] if answer is None else telling.succeeded(state, answer)
    if message.status == "replied":
        # Only once an answer was told: a reader that follows the run again later must not
        # end it at its first event because the message has been answered since.
        return telling.succeeded(state, message.reply) if telling.answered else []
    if message.status in _MESSAGE_ENDS:
        return telling.error(message.error or f"the message {message.status}", message.status)
    return []  # another message's answer, or this one's not yet recorded: a later event says


def _message(state: RunState, watch: str) -> ThreadMessage | None:
    """The thread's message `watch`, if the state is a thread's and keeps it."""
    if not watch or state.thread is None:
        return None
    return next((m for m in state.thread.messages if m.message_id == watch), None)


async def _state(client: WaitstateClient, thread_id: str) -> RunState | None:
    try:
        return await client.query(thread_id)
    except ClientError as err:
        log.info("thread %s: its state not read (%s)", thread_id, err)
        return None
