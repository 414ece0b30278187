"""Threads over HTTP: an operator's key starts a thread with its first message and gets the
thread's token; the token posts the thread's next messages and reads their replies, in that
thread only.

    POST /v1/threads                                     Authorization: Bearer <operator key>
    {"thread_id": "support-1042", "agent": "helpdesk", "text": "My export failed", "key": "k1"}

    POST /v1/threads/{thread_id}/messages                Authorization: Bearer <thread token>
    GET  /v1/threads/{thread_id}                         (the same token)
    GET  /v1/threads/{thread_id}/messages/{message_id}?wait=30

    POST /v1/threads/{thread_id}/token                   Authorization: Bearer <operator key>
    (a fresh token for a thread that lives longer than its tokens)

Checks run cheapest first, as every route's do (`gate`): this gateway serves threads (404), the
body's size (413), the credential (401, 410), the body (422); only then is a thread asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from waitstate.auth.tokens import ThreadClaims
from waitstate.gateway.gate import Gate, GateDep, json_body
from waitstate.gateway.refusals import OUTCOME_UNKNOWN, Refused, error_responses, verified
from waitstate.gateway.threads import (
    MAX_WAIT_SECONDS,
    MessageBody,
    ThreadDesk,
    ThreadStart,
    ThreadStarted,
    ThreadToken,
    ThreadView,
)
from waitstate.schemas.threads import MessageAccepted, ThreadMessage

THREADS_PATH = "/v1/threads"
THREAD_PATH = "/v1/threads/{thread_id}"
MESSAGES_PATH = "/v1/threads/{thread_id}/messages"
MESSAGE_PATH = "/v1/threads/{thread_id}/messages/{message_id}"
TOKEN_PATH = "/v1/threads/{thread_id}/token"

# auto_error=False: a missing credential is refused by the route's admission, after the checks
# that come before it. Each has a scheme of its own, so the document says which route takes
# which.
OPERATOR_KEY = HTTPBearer(
    auto_error=False,
    scheme_name="OperatorKey",
    bearerFormat="operator key",
    description="One of the gateway's operator keys (WAITSTATE_OPERATOR_KEYS): it may start "
    "threads, and renew their tokens.",
)
THREAD_TOKEN = HTTPBearer(
    auto_error=False,
    scheme_name="ThreadToken",
    bearerFormat="thread token",
    description="The token a thread was started with (`thread_token`): it posts messages to "
    "that thread and reads them, and nothing else.",
)
OperatorCredentials = Annotated[HTTPAuthorizationCredentials | None, Security(OPERATOR_KEY)]
ThreadCredentials = Annotated[HTTPAuthorizationCredentials | None, Security(THREAD_TOKEN)]

router = APIRouter(tags=["threads"])


@dataclass(frozen=True)
class Start:
    """A start the checks admitted, and the id of the operator key it came with."""

    body: ThreadStart
    operator: str


@dataclass(frozen=True)
class Post:
    """A message the checks admitted, with the claims of the token it came with."""

    claims: ThreadClaims
    body: MessageBody


def _desk(gate: Gate) -> ThreadDesk:
    if gate.threads is None:
        raise Refused(404, "threads_disabled", "this gateway serves no threads")
    return gate.threads


def _thread_claims(
    gate: Gate, credentials: HTTPAuthorizationCredentials | None, thread_id: str
) -> ThreadClaims:
    """The claims of the request's thread token, once it is found valid for `thread_id`."""
    if credentials is None:
        raise Refused(401, "missing_token", "send Authorization: Bearer <thread token>")
    claims = verified(gate.tokens.verify_thread, credentials.credentials)
    if claims.thread_id != thread_id:
        raise Refused(401, "wrong_thread", "token was issued for another thread")
    return claims


def _operators_configured(desk: ThreadDesk) -> None:
    if not desk.operators.configured:
        raise Refused(
            404,
            "threads_disabled",
            "this gateway starts no threads: no operator key is configured "
            "(WAITSTATE_OPERATOR_KEYS)",
        )


def _operator(desk: ThreadDesk, credentials: HTTPAuthorizationCredentials | None) -> str:
    """The id of the request's operator key, once it is found to be one."""
    if credentials is None:
        raise Refused(401, "missing_operator_key", "send Authorization: Bearer <operator key>")
    operator = desk.operators.identify(credentials.credentials)
    if operator is None:
        raise Refused(401, "invalid_operator_key", "not an operator key of this gateway")
    return operator


async def admitted_start(
    request: Request, credentials: OperatorCredentials, gate: GateDep
) -> Start:
    """Dependency: the request's new thread, once it passed the checks with an operator key."""
    desk = _desk(gate)
    _operators_configured(desk)
    body = await gate.read_body(request)
    operator = _operator(desk, credentials)
    return Start(gate.parse(body, ThreadStart, "invalid_thread"), operator)


async def admitted_operator(credentials: OperatorCredentials, gate: GateDep) -> str:
    """Dependency: the id of the request's operator key (a request with no body)."""
    desk = _desk(gate)
    _operators_configured(desk)
    return _operator(desk, credentials)


async def admitted_post(
    thread_id: str, request: Request, credentials: ThreadCredentials, gate: GateDep
) -> Post:
    """Dependency: the request's message, once it passed the checks with the thread's token."""
    _desk(gate)
    body = await gate.read_body(request)
    claims = _thread_claims(gate, credentials, thread_id)
    return Post(claims, gate.parse(body, MessageBody, "invalid_message"))


async def admitted_reader(
    thread_id: str, credentials: ThreadCredentials, gate: GateDep
) -> ThreadClaims:
    """Dependency: the claims of the thread token of a request that reads the thread."""
    _desk(gate)
    return _thread_claims(gate, credentials, thread_id)


def _responses(errors: dict[int, str], *, body: bool = True) -> dict[int | str, dict[str, Any]]:
    """The route's error answers for OpenAPI; a route that takes no body is never answered 413."""
    documented = error_responses(errors)
    if not body:
        documented.pop(413)
    return documented


_TOKEN_401 = "Missing, malformed or forged token, a token for another thread, or a token that "
_TOKEN_401 += "is not a thread token (a resume token)."
_TOKEN_410 = "The token has expired (`token_expired`), or the thread is closed (`thread_closed`)."
_DISABLED = "`threads_disabled`: this gateway serves no threads. "


@router.post(
    THREADS_PATH,
    status_code=201,
    response_model=ThreadStarted,
    response_description="Created: the thread started with its first message; its token "
    "posts its next messages and reads them.",
    responses=_responses(
        {
            401: "Missing or wrong operator key (`missing_operator_key`, "
            "`invalid_operator_key`): a thread token is none.",
            404: _DISABLED + "Or no operator key is configured (WAITSTATE_OPERATOR_KEYS).",
            409: "`thread_exists`: a thread (open or closed) has this id, and the request is "
            "no retry of the one that started it (the same `key`).",
            410: "A retry of the start of a thread that has closed since.",
            422: "The body is not JSON (`invalid_json`), or not a valid start "
            "(`invalid_thread`): an unknown field, an empty or too long text (32,000 "
            "characters), a bad `thread_id`, `key` or `sender`.",
            429: "The thread has too many messages waiting (`thread_full`).",
            503: "Temporal or the thread could not be reached in time (no worker?), and "
            "nothing was recorded. Retry later: with the same `thread_id` and `key`, the retry "
            "starts one thread.",
            504: OUTCOME_UNKNOWN + " A start's answer gives its `thread_id` too: send both.",
        }
    ),
    operation_id="start_thread",
    summary="Start a thread",
    description="An operator starts a conversation with an agent: the thread starts with its "
    "first message, and the answer carries the thread's token, which posts its next messages "
    "and reads their replies (and nothing else) until it expires. A request that names a "
    "`thread_id` and a `key` may be retried: the retry gets the same thread and message "
    "(`duplicate`), and a token. An answer lost to a timeout (504 `outcome_unknown`) names "
    "both, the gateway's picks if the request named none.",
    openapi_extra=json_body(ThreadStart),
)
async def start_thread(
    start: Annotated[Start, Security(admitted_start)], gate: GateDep
) -> ThreadStarted:
    desk = _desk(gate)
    thread_id, accepted = await gate.deliver(desk.start(start.body), "a new thread")
    expires_at = desk.token_expiry()
    token = gate.tokens.mint_thread(thread_id, expires_at)
    gate.delivered(
        "thread_start",
        "started thread %s (agent %r) with message %s by %r, operator key %s%s",
        thread_id,
        start.body.agent,
        accepted.message_id,
        start.body.sender,
        start.operator,
        " (a retry)" if accepted.duplicate else "",
    )
    return ThreadStarted(
        thread_id=thread_id, thread_token=token, token_expires_at=expires_at, message=accepted
    )


@router.post(
    TOKEN_PATH,
    status_code=201,
    response_model=ThreadToken,
    response_description="Created: a fresh token for the thread; earlier ones stay valid "
    "until they expire.",
    responses=_responses(
        {
            401: "Missing or wrong operator key (`missing_operator_key`, "
            "`invalid_operator_key`): a thread token renews nothing.",
            404: _DISABLED
            + "Or no operator key is configured, or `unknown_thread`: no thread has this id.",
            409: "`not_a_thread`: the run with this id is a task.",
            410: "`thread_closed`: the thread has closed; it takes no message.",
            422: "The request is malformed (`invalid_request`).",
            503: "Temporal or the thread could not be reached in time. Retry later.",
        },
        body=False,
    ),
    operation_id="renew_thread_token",
    summary="Renew a thread's token",
    description="An operator gets a fresh token for a thread that is still open: a thread "
    "lives as long as people write to it, its tokens for `WAITSTATE_THREAD_TOKEN_DAYS`. The "
    "thread is not sent anything.",
)
async def renew_thread_token(
    thread_id: str, operator: Annotated[str, Security(admitted_operator)], gate: GateDep
) -> ThreadToken:
    desk = _desk(gate)
    await gate.deliver(desk.open_thread(thread_id), f"thread {thread_id!r}")
    expires_at = desk.token_expiry()
    token = gate.tokens.mint_thread(thread_id, expires_at)
    gate.delivered(
        "thread_token", "renewed the token of thread %s, operator key %s", thread_id, operator
    )
    return ThreadToken(thread_id=thread_id, thread_token=token, token_expires_at=expires_at)


@router.post(
    MESSAGES_PATH,
    status_code=202,
    response_model=MessageAccepted,
    response_description="Accepted: the thread took the message (`queued`, `ahead` of it), or "
    "knew its `key` (`duplicate`: the earlier send's message).",
    responses=_responses(
        {
            401: _TOKEN_401,
            404: _DISABLED + "Or `unknown_thread`: no thread has this id (any more).",
            409: "The thread refused the message: it works on another and its policy is "
            "`reject` (`thread_busy`); send it again once it has replied.",
            410: _TOKEN_410 + " Or closing (`thread_closing`).",
            422: "The body is not JSON (`invalid_json`), or not a valid message "
            "(`invalid_message`): an unknown field, an empty or too long text (32,000 "
            "characters), a bad `key` or `sender`.",
            429: "The thread has too many messages waiting (`thread_full`): retry once it "
            "has answered some.",
            503: "Temporal or the thread could not be reached, or the thread took no message "
            "for now (a burst past its Updates in flight): nothing was recorded. Retry later.",
            504: OUTCOME_UNKNOWN,
        }
    ),
    operation_id="post_message",
    summary="Post a message to a thread",
    description="A person's next message to the thread, through its token. The agent answers "
    "each message in a turn of its own; read the reply with `GET "
    "/v1/threads/{thread_id}/messages/{message_id}?wait=30`. A retried post with the same "
    "`key` is the same message; a post without one is given one, which an answer lost to a "
    "timeout (504 `outcome_unknown`) names.",
    openapi_extra=json_body(MessageBody),
)
async def post_message(
    thread_id: str, post: Annotated[Post, Security(admitted_post)], gate: GateDep
) -> MessageAccepted:
    desk = _desk(gate)
    what = f"a message to thread {thread_id!r}"
    accepted = await gate.deliver(desk.post(thread_id, post.body), what)
    gate.delivered(
        "thread_message",
        "message %s to thread %s by %r: %s%s",
        accepted.message_id,
        thread_id,
        post.body.sender,
        accepted.status,
        " (a retry)" if accepted.duplicate else "",
    )
    return accepted


@router.get(
    THREAD_PATH,
    response_model=ThreadView,
    response_description="The thread's status and its messages (its last 20, and every one "
    "still queued), each with its reply.",
    responses=_responses(
        {
            401: _TOKEN_401,
            404: _DISABLED + "Or `unknown_thread`: no thread has this id (any more).",
            409: "`not_a_thread`: the run with this id is a task, not a thread.",
            410: "The token has expired.",
            422: "The request is malformed (`invalid_request`).",
        },
        body=False,
    ),
    operation_id="read_thread",
    summary="Read a thread",
    description="The thread's conversation as it stands, through its token.",
)
async def read_thread(
    thread_id: str,
    claims: Annotated[ThreadClaims, Security(admitted_reader)],
    gate: GateDep,
) -> ThreadView:
    return await gate.deliver(_desk(gate).view(thread_id), f"a read of thread {thread_id!r}")


@router.get(
    MESSAGE_PATH,
    response_model=ThreadMessage,
    response_description="The message: `replied` with its `reply`; `interrupted`, "
    "`max_turns` or `failed` (with its `error`) if it ended without one; `queued` or "
    "`working` if `wait` passed first.",
    responses=_responses(
        {
            401: _TOKEN_401,
            404: _DISABLED + "Or `unknown_thread`, or `unknown_message`: the thread has no such "
            "message, or no longer keeps it (it keeps its last 20).",
            409: "`not_a_thread`: the run with this id is a task, not a thread.",
            410: "The token has expired.",
            422: f"`wait` is not a number of seconds from 0 to {MAX_WAIT_SECONDS:g}.",
            429: "Too many requests wait for a reply in this thread, or in all (`too_many_waits`).",
        },
        body=False,
    ),
    operation_id="read_message",
    summary="Read a message and its reply",
    description="A message of the thread, through its token. With `wait`, the answer comes "
    "once the message is answered (or ended without an answer), once the thread has ended, "
    "or after `wait` seconds, whichever is first: a long poll.",
)
async def read_message(
    thread_id: str,
    message_id: str,
    claims: Annotated[ThreadClaims, Security(admitted_reader)],
    gate: GateDep,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_WAIT_SECONDS,
            description="Seconds to wait for the reply (at most "
            f"{MAX_WAIT_SECONDS:g}); 0: answer at once.",
        ),
    ] = 0,
) -> ThreadMessage:
    what = f"a read of message {message_id!r} of thread {thread_id!r}"
    return await gate.deliver(_desk(gate).message(thread_id, message_id, wait), what)
