"""A run's events as server-sent events, and the view links that open them.

    GET  /v1/runs/{run_id}/events?token=<view token>     (or Authorization: Bearer <view token
                                                          or operator key>; Last-Event-ID)
    POST /v1/runs/{run_id}/view-link                     Authorization: Bearer <operator key>
    POST /v1/runs/{run_id}/deltas                        Authorization: Bearer <publish token>

A view token reads one run's events and nothing else: it may travel in the link's query string
(a browser's `EventSource` sends no header), and the gateway's logs never print it (`redaction`).
An operator key reads any run's. Each event is `id: <run>.<event>`, `event: <kind>`, `data:
<RunEvent JSON>`; a comment every 15 s keeps an idle stream open through proxies; the stream
ends when the run's chain ends, and a reader that resumes after its last event is answered 204
(which stops an `EventSource` from reconnecting).

Workers post a run's model text as it is written (`deltas`, with a publish token minted per
call); the stream's current readers get each as `event: model.delta` with no `id:`, so a
reader's `Last-Event-ID` never names one and a resumed reader never gets them again. So are the
attempts of a call that failed and is tried again (`event: retry`), which the run's history does
not hold until the call ends: a run's feed looks for them while it has readers and a call is
open.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Security
from fastapi.responses import Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import ClientDisconnect
from temporalio.service import RPCError

from waitstate.auth.tokens import MAX_TOKEN_CHARS
from waitstate.cancelling import ended
from waitstate.client import BadPosition, Position, RunNotFound
from waitstate.gateway.gate import SCHEMA_REF, GateDep
from waitstate.gateway.refusals import Refused, error_responses, verified
from waitstate.gateway.routes.threads import OperatorCredentials
from waitstate.gateway.streams import Ephemeral, EventDesk, ModelDelta, Read

EVENTS_PATH = "/v1/runs/{run_id}/events"
VIEW_LINK_PATH = "/v1/runs/{run_id}/view-link"
DELTAS_PATH = "/v1/runs/{run_id}/deltas"
MAX_DELTA_BYTES = 16 * 1024  # a delta's body; workers send at most ~2,000 characters at once
MAX_DELTA_CHARS = 8_000
KEEPALIVE_SECONDS = 15.0
MAX_RUN_ID_CHARS = 1000  # Temporal's own limit on a workflow id

VIEW_CREDENTIALS = HTTPBearer(
    auto_error=False,
    scheme_name="ViewToken",
    bearerFormat="view token or operator key",
    description="A run's view token (from its view link; it may be sent as `?token=` "
    "instead), or one of the gateway's operator keys.",
)
ViewCredentials = Annotated[HTTPAuthorizationCredentials | None, Security(VIEW_CREDENTIALS)]
PUBLISH_CREDENTIALS = HTTPBearer(
    auto_error=False,
    scheme_name="PublishToken",
    bearerFormat="publish token",
    description="A publish token a worker minted for the run's model call.",
)
PublishCredentials = Annotated[HTTPAuthorizationCredentials | None, Security(PUBLISH_CREDENTIALS)]

router = APIRouter(tags=["events"])


class ViewLink(BaseModel):
    """A link that follows one run's events, and nothing else, until it expires."""

    run_id: str
    url: str = Field(
        description="The run's timeline: a page for people that shows its events as they come."
    )
    events_url: str = Field(
        description="The run's events as server-sent events, for a program or an `EventSource`."
    )
    token: str = Field(description="The view token both URLs carry (`?token=`).")
    expires_at: datetime


class DeltaBody(BaseModel):
    """A piece of a model's answer as it is written, from the worker making the call."""

    model_config = ConfigDict(extra="forbid")

    turn: int | None = Field(default=None, description="The run's turn the call is for.")
    call: str = Field(
        min_length=1, max_length=200, description="The call: `<activity id>.<attempt>`."
    )
    text: str = Field(
        min_length=1,
        max_length=MAX_DELTA_CHARS,
        description="The text written since the call's previous delta.",
    )


def _desk(gate: GateDep) -> EventDesk:
    if gate.events is None:
        raise Refused(404, "events_disabled", "this gateway streams no events")
    return gate.events


async def _where(desk: EventDesk, run_id: str, after: Position | None) -> tuple[Position, bool]:
    """Where a reader of `run_id` starts after `after`, and whether it has anything to read
    (`RunEvents.where`).

    Raises:
        Refused: 404 no such run; 503 Temporal could not be reached.
    """
    try:
        return await desk.events.where(run_id, after)
    except RunNotFound:
        raise Refused(404, "run_not_found", f"no run {run_id!r}") from None
    except RPCError as err:
        raise Refused(
            503, "temporal_unavailable", f"Temporal could not be reached: {err}"
        ) from None


def _reader(desk: EventDesk, run_id: str, presented: str | None) -> None:
    """Checks that `presented` may read `run_id`'s events: its view token, or an operator key."""
    if not presented:
        raise Refused(401, "missing_token", "send ?token=<view token> or Authorization: Bearer")
    if len(run_id) > MAX_RUN_ID_CHARS or len(presented) > MAX_TOKEN_CHARS:
        raise Refused(401, "invalid_token", "not a view token")
    if desk.operators.identify(presented) is not None:
        return
    claims = verified(desk.tokens.verify_view, presented)
    if claims.run_id != run_id:
        raise Refused(401, "wrong_run", "token was issued for another run")


@router.get(
    EVENTS_PATH,
    response_class=StreamingResponse,
    operation_id="run_events",
    summary="Follow a run's events",
    description="The run's events as server-sent events, as Temporal records them: its model "
    "and tool calls, its operations' reports, its approvals and questions, its messages, its "
    "waits, its status, and its end; into the runs it continues as. Each event's `id` is where "
    "a reader resumes (`Last-Event-ID`); each `data` is a `RunEvent`.",
    response_description="The run's events as `text/event-stream`, from its current run's "
    "start (or after `Last-Event-ID`), until its chain of runs ends.",
    responses={
        200: {
            "description": "The run's events as `text/event-stream`, from its current run's "
            "start (or after `Last-Event-ID`), until its chain of runs ends.",
            "content": {
                "text/event-stream": {"schema": {"$ref": SCHEMA_REF.format(model="RunEvent")}}
            },
        },
        204: {"description": "Resumed after the last event of a run that has ended."},
        **{
            status: answer
            for status, answer in error_responses(
                {
                    400: "`Last-Event-ID` (or `after`) is not an event id of this stream "
                    "(`bad_position`).",
                    401: "Missing, malformed or forged token, or a view token for another run.",
                    404: "No run has this id (`run_not_found`), or the gateway streams no "
                    "events (`events_disabled`).",
                    410: "The view token has expired (`token_expired`).",
                    503: "Temporal could not be reached, or the gateway holds as many streams "
                    "as it may (`too_many_streams`): retry later.",
                }
            ).items()
            if status not in (413, 422)
        },
    },
)
async def run_events(
    run_id: str,
    gate: GateDep,
    credentials: ViewCredentials,
    token: Annotated[str | None, Query(description="A view token, as a link carries it.")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[str | None, Query(description="As `Last-Event-ID`.")] = None,
) -> Response:
    desk = _desk(gate)
    _reader(desk, run_id, token or (credentials.credentials if credentials else None))
    resume = last_event_id or after
    try:
        position = Position.parse(resume) if resume else None
    except BadPosition as err:
        raise Refused(400, "bad_position", str(err)) from None
    if desk.open_streams >= desk.max_streams:
        raise Refused(503, "too_many_streams", "the gateway holds as many streams as it may")
    start, more = await _where(desk, run_id, position)
    if not more:
        return Response(status_code=204)
    return StreamingResponse(
        _stream(desk, run_id, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


KEEPALIVE = ": keepalive\n\n"  # an SSE comment: a stream's sign of life while nothing comes
END = None  # what `feeding` takes when its items end


@asynccontextmanager
async def feeding(
    desk: EventDesk, items: AsyncIterator[Read]
) -> AsyncIterator[AsyncIterator[Read | str | None]]:
    """`items` read ahead of an SSE stream of `desk`'s, taken as they come: `KEEPALIVE` when
    nothing came for `KEEPALIVE_SECONDS`, `END` once they end; the taking stops when the gateway
    stops. The stream counts among the desk's open ones until the block ends."""
    desk.open_streams += 1
    queue: asyncio.Queue[Read | None] = asyncio.Queue(maxsize=64)

    async def read() -> None:
        try:
            async for item in items:
                await queue.put(item)
        finally:
            await queue.put(END)

    async def take() -> AsyncGenerator[Read | str | None]:
        while True:
            getting = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait(
                {getting, closing}, timeout=KEEPALIVE_SECONDS, return_when="FIRST_COMPLETED"
            )
            if getting not in done:
                getting.cancel()
                if closing in done:
                    return
                yield KEEPALIVE
                continue
            item = getting.result()
            yield item
            if item is END:
                return

    reading = asyncio.create_task(read())
    closing = asyncio.create_task(desk.closing.wait())
    taking = take()
    try:
        yield taking
    finally:
        await taking.aclose()
        desk.open_streams -= 1
        for task in (reading, closing):
            task.cancel()
        await ended(reading)  # its failure ends the stream as its end does


async def _stream(desk: EventDesk, run_id: str, start: Position) -> AsyncIterator[str]:
    """The SSE text of `run_id`'s events after `start`, with a comment when nothing came for
    `KEEPALIVE_SECONDS`; ends with the run's chain, or when the gateway stops."""
    async with feeding(desk, desk.feeds.read(run_id, start)) as taken:
        yield ": waitstate run events\n\n"  # the headers go now, not at the first event
        async for event in taken:
            if event is END:
                return
            if isinstance(event, str):
                yield event
            elif isinstance(event, Ephemeral):  # no id to resume after
                yield f"event: {event.kind}\ndata: {event.model_dump_json()}\n\n"
            else:
                yield f"id: {event.id}\nevent: {event.kind}\ndata: {event.model_dump_json()}\n\n"


@router.post(
    VIEW_LINK_PATH,
    response_model=ViewLink,
    operation_id="view_link",
    summary="Hand out a run's view link",
    description="An operator gets a link that follows one run's events, read-only, until it "
    "expires (7 days): for a person, a page or a program that should see the run and nothing "
    "else. Its `url` opens the run's timeline, a page that shows the events as they come; its "
    "`events_url` is the stream itself.",
    response_description="A view link for the run: its events, read-only, until it expires.",
    responses={
        status: answer
        for status, answer in error_responses(
            {
                401: "Missing or wrong operator key (`missing_operator_key`, "
                "`invalid_operator_key`).",
                404: "No run has this id (`run_not_found`), or the gateway streams no events.",
            }
        ).items()
        if status not in (413, 422)
    },
)
async def view_link(run_id: str, gate: GateDep, credentials: OperatorCredentials) -> ViewLink:
    desk = _desk(gate)
    if credentials is None:
        raise Refused(401, "missing_operator_key", "send Authorization: Bearer <operator key>")
    if desk.operators.identify(credentials.credentials) is None:
        raise Refused(401, "invalid_operator_key", "not an operator key of this gateway")
    if len(run_id) > MAX_RUN_ID_CHARS:
        raise Refused(404, "run_not_found", "no run has so long an id")
    await _where(desk, run_id, None)  # the run exists
    expires_at = datetime.now(UTC) + desk.view_lifetime
    token = desk.tokens.mint_view(run_id, expires_at)
    return ViewLink(
        run_id=run_id,
        url=desk.view_link(run_id, token),
        events_url=desk.events_link(run_id, token),
        token=token,
        expires_at=expires_at,
    )


@router.post(
    DELTAS_PATH,
    status_code=202,
    operation_id="run_deltas",
    summary="Hand a run's readers its model's text as it is written",
    description="A worker posts pieces of a model's answer as the provider streams it (OpenAI, "
    "OpenAI-compatible and Anthropic providers). The run's stream readers of the moment get "
    "each as an event `model.delta` without an `id`: it is never kept, never in the run's "
    "history, and a "
    "reader that resumes does not get it again. With no reader, it is dropped.",
    response_description="Taken: handed to the run's current readers, if any.",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": DeltaBody.model_json_schema()}},
        }
    },
    responses={
        202: {"description": "Taken: handed to the run's current readers, if any."},
        **{
            status: answer
            for status, answer in error_responses(
                {
                    400: "The body was cut short (`client_disconnected`).",
                    401: "Missing, malformed or forged token, a token of another kind, or a "
                    "publish token for another run.",
                    404: "The gateway streams no events (`events_disabled`).",
                    410: "The publish token has expired (`token_expired`).",
                    413: f"The body is over {MAX_DELTA_BYTES} bytes (`body_too_large`).",
                    422: f"Not a delta (`invalid_delta`): text of 1 to {MAX_DELTA_CHARS} "
                    "characters, the call, the turn.",
                }
            ).items()
            if status != 503
        },
    },
)
async def run_deltas(
    run_id: str, request: Request, gate: GateDep, credentials: PublishCredentials
) -> Response:
    desk = _desk(gate)
    # The body first, as every route of the gateway reads it: an oversize one is 413 whoever
    # sends it, and reading one costs at most MAX_DELTA_BYTES.
    body = await _delta_body(request)
    if credentials is None:
        raise Refused(401, "missing_token", "send Authorization: Bearer <publish token>")
    claims = verified(desk.tokens.verify_publish, credentials.credentials)
    if claims.run_id != run_id:
        raise Refused(401, "wrong_run", "token was issued for another run")
    delta = gate.parse(body, DeltaBody, "invalid_delta")
    desk.feeds.publish(
        run_id,
        ModelDelta(turn=delta.turn, call=delta.call, text=delta.text, at=datetime.now(UTC)),
    )
    return Response(status_code=202)


async def _delta_body(request: Request) -> bytes:
    """The body of a delta, read only up to `MAX_DELTA_BYTES` (the gateway's own limit is for
    reports, and far larger).

    Raises:
        Refused: 400 the body was cut short, 413 it is too large.
    """
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_DELTA_BYTES:
        raise Refused(413, "body_too_large", f"the body is over {MAX_DELTA_BYTES} bytes")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_DELTA_BYTES:
                raise Refused(413, "body_too_large", f"the body is over {MAX_DELTA_BYTES} bytes")
    except ClientDisconnect:
        raise Refused(400, "client_disconnected", "the body was cut short") from None
    return bytes(body)
