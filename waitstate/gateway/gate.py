"""What every route of the gateway does around its delivery: the checks before it, the
refusals and the count after it.

Checks run cheapest first and bad input never reaches a run: body size (413), token (401,
410), body (422: not JSON, not a valid body, or a number JSON cannot keep, as `NaN`,
`Infinity` or `1e999`); only then is the completion, decision or answer delivered to the run
(see `delivery`). A genuine token that has expired, on a request otherwise admitted, goes on
to a deliverer that can tell what became of that request's earlier delivery (the
`TemporalDeliverer`, which sends nothing then); elsewhere it is refused, 410. The pages' forms
admit their tokens with the same `Gate.verify` and `expiry_first`. Each route's
admission is a dependency over `Gate.admit`, whose own parameters (the route's path and
headers) FastAPI checks before it runs.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeVar

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ValidationError
from pydantic_core import from_json
from starlette.requests import ClientDisconnect

from waitstate.auth.tokens import ExpiredToken, InvalidToken, ResumeClaims, ResumeTokens
from waitstate.gateway.delivery import Deliverer, TemporalDeliverer
from waitstate.gateway.refusals import REQUEST_LOG, Failed, Refused, describe
from waitstate.schemas.operations import non_finite_at

if TYPE_CHECKING:
    from waitstate.gateway.streams import EventDesk
    from waitstate.gateway.threads import ThreadDesk

log = logging.getLogger(REQUEST_LOG)

SCHEMA_REF = "#/components/schemas/{model}"
# What a number that is not finite is spelled with: NaN, Infinity, or one past a double's range
# (1.8e308: an exponent of three digits, or over 308 digits in a row).
_MAYBE_NON_FINITE = re.compile(rb"NaN|Infinity|[eE][+-]?\d{3}|\d{309}")

_Body = TypeVar("_Body", bound=BaseModel)
_Outcome = TypeVar("_Outcome")

# auto_error=False: a missing token is refused by `Gate.admit`, after the size check.
BEARER = HTTPBearer(
    auto_error=False,
    bearerFormat="resume token",
    description="The resume token the operation's callback, the approval request's links, or "
    "the question's link, were issued with.",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]


@dataclass(frozen=True)
class Admitted(Generic[_Body]):
    """A request that passed the checks: its token's claims, its parsed body, and the body's
    bytes as they came (what tells one request's copies from another request)."""

    claims: ResumeClaims
    body: _Body
    raw: bytes = b""


class Acceptance(BaseModel):
    """What a route answers when the run took the request (each adds what it is about)."""

    status: Literal["accepted"] = "accepted"


@dataclass(frozen=True)
class Gate:
    """What the routes share: the checks before delivery, the delivery, and its count. Set on
    the app by `create_app`; a route gets it with `GateDep`."""

    deliverer: Deliverer
    tokens: ResumeTokens
    max_body_bytes: int
    registry: CollectorRegistry
    accepted: Counter
    # What the thread routes send messages with; None: this gateway serves no threads.
    threads: ThreadDesk | None = None
    # What the event routes read runs' events with; None: this gateway streams no events.
    events: EventDesk | None = None

    @classmethod
    def create(
        cls,
        deliverer: Deliverer,
        tokens: ResumeTokens,
        max_body_bytes: int,
        registry: CollectorRegistry,
        threads: ThreadDesk | None = None,
        events: EventDesk | None = None,
    ) -> Gate:
        """A gate whose count of deliveries goes to `registry`."""
        accepted = Counter(
            "waitstate_gateway_accepted",
            "Completions, decisions and answers delivered, and messages to threads taken",
            ["endpoint"],
            registry=registry,
        )
        return cls(deliverer, tokens, max_body_bytes, registry, accepted, threads, events)

    async def admit(
        self,
        request: Request,
        credentials: HTTPAuthorizationCredentials | None,
        *,
        subject: str | frozenset[str],
        kind: str,
        model: type[_Body],
        invalid_code: str,
    ) -> Admitted[_Body]:
        """The token's claims and the parsed body of a request.

        Args:
            request: The request, its body not read yet.
            credentials: The bearer token, if the request had one.
            subject: The `operation_id` claim the token must carry for this URL (or one of
                them).
            kind: What a subject is, for the refusal of a token for another one
                (code `wrong_<kind>`).
            model: The body's model.
            invalid_code: The code of a refusal of a JSON body that is not a valid `model`.

        Raises:
            Refused: 400 the body was cut short, 413 it is too large, 401 or 410 the token,
                422 the body.
        """
        body = await self.read_body(request)
        if credentials is None:
            raise Refused(401, "missing_token", "send Authorization: Bearer <resume token>")
        claims, expired = self.verify(credentials.credentials)
        subjects = {subject} if isinstance(subject, str) else subject
        with expiry_first(expired):
            if claims.operation_id not in subjects:
                raise Refused(401, f"wrong_{kind}", f"token was issued for another {kind}")
            parsed = self.parse(body, model, invalid_code)
        return Admitted(claims, parsed, body)

    def verify(self, token: str) -> tuple[ResumeClaims, Refused | None]:
        """The claims of a resume token (a request's, or a page's form's), and the refusal of
        its expiry if it has expired: its claims are then handed on only to a deliverer that
        recalls (see `TemporalDeliverer`), and the checks after the token's run under
        `expiry_first`.

        Raises:
            Refused: 401 not genuine; 410 expired, for a deliverer that cannot recall.
        """
        try:
            return self.tokens.verify(token), None
        except ExpiredToken as err:
            expired = Refused(410, "token_expired", str(err))
            if not isinstance(self.deliverer, TemporalDeliverer):
                raise expired from None
            return self.tokens.signed_claims(token), expired
        except InvalidToken as err:
            raise Refused(401, "invalid_token", str(err)) from None

    async def read_body(self, request: Request) -> bytes:
        """The request's body, read up to the gate's limit.

        Raises:
            Refused: 400 the body was cut short, 413 it is too large.
        """
        try:
            body = await _read_body(request, self.max_body_bytes)
        except ClientDisconnect:
            raise Refused(400, "client_disconnected", "the body was cut short") from None
        if body is None:
            raise Refused(413, "body_too_large", f"the body is over {self.max_body_bytes} bytes")
        return body

    def parse(self, body: bytes, model: type[_Body], invalid_code: str) -> _Body:
        """`body` as a `model`.

        Raises:
            Refused: 422 `non_finite_number`, `invalid_json`, or `invalid_code`: it is not a
                valid `model`.
        """
        if (where := _non_finite_number(body)) is not None:
            # Python's JSON would take it, and Temporal's converter would store it as null.
            raise Refused(
                422,
                "non_finite_number",
                f"{where}: NaN, Infinity and numbers beyond a double's range are not kept by "
                "JSON; send a finite number, or the value as a string",
            )
        try:
            return model.model_validate_json(body)
        except ValidationError as err:
            not_json = any(error["type"] == "json_invalid" for error in err.errors())
            code = "invalid_json" if not_json else invalid_code
            raise Refused(422, code, describe(err.errors())) from None

    async def deliver(self, delivery: Awaitable[_Outcome], what: str) -> _Outcome:
        """The run's outcome of `delivery` (the deliverer's call, not awaited yet).

        Raises:
            Refused: the run refused it, or could not be reached.
            Failed: the deliverer failed (a bug), logged with `what` was delivered.
        """
        try:
            return await delivery
        except Refused:
            raise
        except Exception as err:
            log.exception("delivering %s failed", what)
            raise Failed from err

    def delivered(self, endpoint: str, message: str, *args: object) -> None:
        """Log a delivery the run took (`message % args`) and count it for `endpoint`."""
        log.info(message, *args)
        self.accepted.labels(endpoint=endpoint).inc()


@contextlib.contextmanager
def expiry_first(expired: Refused | None) -> Iterator[None]:
    """Run the checks after a token's (`Gate.verify`): a refusal of theirs is the token's
    expiry (`expired`), if it has expired. An expired token is refused as such whatever else is
    wrong: the checks after the token's are for a request the run may learn of, and an expired
    token's request can only learn what became of its earlier delivery."""
    try:
        yield
    except Refused:
        if expired is not None:
            raise expired from None
        raise


def gate(request: Request) -> Gate:
    """Dependency: the `Gate` of the request's app."""
    shared: Gate = request.app.state.gate
    return shared


GateDep = Annotated[Gate, Depends(gate)]


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` for a route whose JSON body is `model`, read by `Gate.admit`, not FastAPI (so
    the app adds `model`'s schema to the document's components itself)."""
    schema = {"$ref": SCHEMA_REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it is known to be over `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        return None
    # Counted as it arrives: a chunked body has no Content-Length to check.
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _non_finite_number(body: bytes) -> str | None:
    """Where the JSON `body` has a number that is not finite (`NaN`, `Infinity`, `-Infinity`,
    or one that overflows a double, as `1e999`), e.g. `result.rows`; None if it has none or is
    not JSON (the model's parse says so)."""
    if not _MAYBE_NON_FINITE.search(body):
        return None  # the common case: no walk through the parsed body
    try:
        value = from_json(body, allow_inf_nan=True)
    except ValueError:
        return None
    return non_finite_at(value)
