"""The webhook gateway: external systems report on long operations, and people decide on
approval requests and answer the questions operations' jobs ask, here.

    POST /v1/operations/{operation_id}/complete
    Authorization: Bearer <resume token>
    {"status": "succeeded", "result": {...}}

    POST /v1/approvals/{request_id}/decision
    Authorization: Bearer <the approval link's token>
    {"decision": "approve", "reviewer": "ana", "comment": "ok"}

    POST /v1/questions/{question_id}/answer
    Authorization: Bearer <the question link's token>
    {"action": "accept", "content": {"region": "EMEA"}, "responder": "ana"}

Checks run cheapest first and bad input never reaches a run: body size (413), token (401,
410), body (422: not JSON, not a valid body, or a number JSON cannot keep, as `NaN`,
`Infinity` or `1e999`); only then is the completion, decision or answer delivered to the run
(see `delivery`).

No log line carries a token or a piece of one: the gateway reads tokens from the
Authorization header only, logs paths without their query strings, and `RedactTokens`
strips anything shaped like a token from the lines of the server around it (uvicorn's access
log prints the query string).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Annotated, Any, Literal, TypeVar
from uuid import uuid4

from fastapi import FastAPI, Header, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from pydantic import BaseModel, Field, ValidationError
from pydantic_core import from_json
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from waitstate.elicitation import schema_problem
from waitstate.gateway.delivery import Deliverer, DeliveryRefused
from waitstate.gateway.tokens import (
    ExpiredToken,
    InvalidToken,
    ResumeClaims,
    ResumeTokens,
    approval_subject,
    question_subject,
)
from waitstate.schemas.approvals import ApprovalStatus, DecisionBody
from waitstate.schemas.operations import Completion, OperationStatus, non_finite_at
from waitstate.schemas.questions import AnswerBody, QuestionStatus

log = logging.getLogger(__name__)

COMPLETE_PATH = "/v1/operations/{operation_id}/complete"
DECISION_PATH = "/v1/approvals/{request_id}/decision"
ANSWER_PATH = "/v1/questions/{question_id}/answer"
DEFAULT_MAX_BODY_BYTES = 1_048_576
MAX_REPORT_ID_CHARS = 200
_SCHEMA_REF = "#/components/schemas/{model}"
# A resume token is base64url claims (JSON, so `eyJ...`), a dot and a 43-character base64url
# signature. Any run of 40 base64url characters or more (ids here are shorter: a request id is
# a 36-character UUID), or a start of the claims, is taken for one or a piece of one.
_TOKENISH = re.compile(r"[A-Za-z0-9_-]{40,}|eyJ[A-Za-z0-9_-]{5,}")
# What a number that is not finite is spelled with: NaN, Infinity, or one past a double's range
# (1.8e308: an exponent of three digits, or over 308 digits in a row).
_MAYBE_NON_FINITE = re.compile(rb"NaN|Infinity|[eE][+-]?\d{3}|\d{309}")
_QUERY_VALUE = re.compile(r"([?&][^=\s&#\"']*=)[^\s&#\"']*")
REDACTED = "[redacted]"

_Body = TypeVar("_Body", bound=BaseModel)
_Outcome = TypeVar("_Outcome")


class ErrorDetail(BaseModel):
    """Why a request was refused."""

    code: str = Field(description="Short snake_case reason, e.g. `token_expired`.")
    message: str = Field(description="For people: what was wrong and what to do.")


class ErrorBody(BaseModel):
    """Every error answer of the gateway."""

    error: ErrorDetail


class Accepted(BaseModel):
    """The run took the completion."""

    status: Literal["accepted"] = "accepted"
    operation_id: str
    operation_status: OperationStatus = Field(
        description="The operation's status after the run applied the completion."
    )


class DecisionAccepted(BaseModel):
    """The run took the decision."""

    status: Literal["accepted"] = "accepted"
    request_id: str
    approval_status: ApprovalStatus = Field(
        description="The request's status after the run applied the decision."
    )


class AnswerAccepted(BaseModel):
    """The run took the answer, and handed it to the job that asked."""

    status: Literal["accepted"] = "accepted"
    question_id: str
    question_status: QuestionStatus = Field(
        description="The question's status after the run applied the answer: `answered` or "
        "`declined`."
    )
    delivered: bool = Field(description="Whether the job that asked took the answer.")
    reason: str = Field(default="", description="Why the job did not take it, if it did not.")


# Module-level, not inside create_app: FastAPI resolves the endpoint's (string) annotations in
# this module's globals. auto_error=False: a missing token is answered by the endpoint, after
# the size check.
_ReportId = Annotated[
    str | None,
    Header(
        alias="Webhook-Id",
        min_length=1,
        max_length=MAX_REPORT_ID_CHARS,
        description="The sender's id for this report, the same for its retries and copies.",
    ),
]
_BEARER = HTTPBearer(
    auto_error=False,
    bearerFormat="resume token",
    description="The resume token the operation's callback, the approval request's links, or "
    "the question's link, were issued with.",
)

# The endpoints read their bodies themselves (to cap their size before parsing), so FastAPI
# does not know these models: the routes' `openapi_extra` refers to them, and `_GatewayAPI`
# adds their schemas to the components.
_HAND_READ_BODIES: tuple[type[BaseModel], ...] = (Completion, DecisionBody, AnswerBody)

_COMMON_ERRORS = {
    410: "The token has expired.",
    413: "The body is larger than the gateway accepts.",
    503: "Temporal or the run could not be reached in time. Retry later.",
}


def _error_responses(descriptions: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """An endpoint's error answers for OpenAPI: its own descriptions and the common ones."""
    merged = {**descriptions, **_COMMON_ERRORS}
    return {
        status: {"model": ErrorBody, "description": merged[status]} for status in sorted(merged)
    }


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` for a route whose JSON body is `model`, read by the endpoint itself."""
    schema = {"$ref": _SCHEMA_REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


class _GatewayAPI(FastAPI):
    def openapi(self) -> dict[str, Any]:
        schema = super().openapi()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in _HAND_READ_BODIES:
            if model.__name__ not in components:
                body = model.model_json_schema(ref_template=_SCHEMA_REF)
                components.update(body.pop("$defs", {}))
                components[model.__name__] = body
        return schema


@dataclass(frozen=True)
class _Gate:
    """What every endpoint does around its delivery: the checks before, the refusals after."""

    tokens: ResumeTokens
    max_body_bytes: int

    async def admit(
        self,
        request: Request,
        credentials: HTTPAuthorizationCredentials | None,
        *,
        subject: str | frozenset[str],
        subject_kind: str,
        model: type[_Body],
        invalid_code: str,
    ) -> tuple[ResumeClaims, _Body] | JSONResponse:
        """The token's claims and the parsed body, or the refusal to answer with.

        Args:
            request: The request, its body not read yet.
            credentials: The bearer token, if the request had one.
            subject: The `operation_id` claim the token must carry for this URL (or one of
                them).
            subject_kind: What a subject is, for the refusal of a token for another one
                (code `wrong_<kind>`).
            model: The body's model.
            invalid_code: The code of a refusal of a JSON body that is not a valid `model`.
        """
        try:
            body = await _read_body(request, self.max_body_bytes)
        except ClientDisconnect:
            return _refuse(request, 400, "client_disconnected", "the body was cut short")
        if body is None:
            return _refuse(
                request, 413, "body_too_large", f"the body is over {self.max_body_bytes} bytes"
            )

        if credentials is None:
            return _refuse(
                request, 401, "missing_token", "send Authorization: Bearer <resume token>"
            )
        try:
            claims = self.tokens.verify(credentials.credentials)
        except ExpiredToken as err:
            return _refuse(request, 410, "token_expired", str(err))
        except InvalidToken as err:
            return _refuse(request, 401, "invalid_token", str(err))
        subjects = {subject} if isinstance(subject, str) else subject
        if claims.operation_id not in subjects:
            return _refuse(
                request,
                401,
                f"wrong_{subject_kind}",
                f"token was issued for another {subject_kind}",
            )

        if (where := _non_finite_number(body)) is not None:
            # Python's JSON would take it, and Temporal's converter would store it as null.
            return _refuse(
                request,
                422,
                "non_finite_number",
                f"{where}: NaN, Infinity and numbers beyond a double's range are not kept by "
                "JSON; send a finite number, or the value as a string",
            )
        try:
            parsed = model.model_validate_json(body)
        except ValidationError as err:
            not_json = any(error["type"] == "json_invalid" for error in err.errors())
            code = "invalid_json" if not_json else invalid_code
            return _refuse(request, 422, code, _describe(err.errors()))
        return claims, parsed

    async def deliver(
        self, request: Request, delivery: Awaitable[_Outcome], what: str
    ) -> _Outcome | JSONResponse:
        """The run's outcome of `delivery`, or the refusal to answer with.

        Args:
            request: The request being answered.
            delivery: The deliverer's call, not awaited yet.
            what: What is delivered, for the log.
        """
        try:
            return await delivery
        except DeliveryRefused as err:
            code = err.code or _code_for(err.status_code)
            return _refuse(request, err.status_code, code, err.message)
        except Exception:
            # A bug, not a refusal. Answered here rather than by the app-wide handler, which
            # Starlette follows by re-raising into the server (a second traceback in the log).
            log.exception("delivering %s failed", what)
            return _error(500, "internal_error", "the gateway failed; retry later")


def create_app(
    deliverer: Deliverer,
    tokens: ResumeTokens,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The gateway's ASGI app.

    Args:
        deliverer: Hands verified completions, decisions and answers to runs
            (`TemporalDeliverer` in production).
        tokens: Verifies resume tokens.
        max_body_bytes: Larger bodies are refused with 413 before they are parsed.
        registry: Where its metrics go, served at /metrics (others may share it: the fleet's
            run counts); a registry of its own by default.
    """
    app = _GatewayAPI(
        title="waitstate gateway",
        version="1",
        description="External systems report on the long operations of agent runs, and people "
        "decide on their approval requests and answer their operations' questions, here.",
    )
    gate = _Gate(tokens, max_body_bytes)
    # A registry per app: two gateways in one process (tests) keep their own counts.
    registry = registry if registry is not None else CollectorRegistry()
    app.state.refusals = Counter(
        "waitstate_gateway_refusals",
        "Requests refused, by reason: bad tokens, malformed bodies, refused deliveries",
        ["code", "status"],
        registry=registry,
    )
    app.state.accepted = Counter(
        "waitstate_gateway_accepted",
        "Completions, decisions and answers delivered",
        ["endpoint"],
        registry=registry,
    )

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        COMPLETE_PATH,
        response_model=Accepted,
        response_description="Accepted: the run applied the completion.",
        responses=_error_responses(
            {
                401: "Missing, malformed or forged token, a token for another operation, or a "
                "nonce the run does not know.",
                404: "No such run, or the run has no such operation.",
                409: "Not applied: the operation is already resolved, expired or cancelled, "
                "this is a duplicate of a completion already applied, a progress report the "
                "operation already shows (`duplicate_report`), or the run has ended. "
                "Do not retry.",
                422: "The body is not JSON, or not a valid completion, or it asks a question "
                "whose `requested_schema` takes no answer (`invalid_question`: one flat object of "
                "plain fields, as MCP elicitation allows; no `$ref`; patterns RE2 accepts).",
            }
        ),
        operation_id="complete_operation",
        summary="Report on a long operation",
        description="An external system reports progress on a job, or its result or failure. "
        "Copies of one report (retries, at-least-once delivery) are applied once; give each "
        "report a `Webhook-Id` (or `Idempotency-Key`) header that its copies keep, so that two "
        "progress reports with the same body are told apart from a copy.",
        openapi_extra=_json_body(Completion),
    )
    async def complete(
        operation_id: str,
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
        webhook_id: _ReportId = None,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias="Idempotency-Key",
                min_length=1,
                max_length=MAX_REPORT_ID_CHARS,
                description="Read when there is no Webhook-Id.",
            ),
        ] = None,
    ) -> Accepted | JSONResponse:
        admitted = await gate.admit(
            request,
            credentials,
            subject=operation_id,
            subject_kind="operation",
            model=Completion,
            invalid_code="invalid_completion",
        )
        if isinstance(admitted, JSONResponse):
            return admitted
        claims, completion = admitted
        for i, question in enumerate(completion.questions or ()):
            # A question no answer could fit would reach the run only to be refused there:
            # the job is told now, and why.
            if problem := schema_problem(question.requested_schema):
                where = f"questions.{i} ({question.key!r}).requested_schema"
                return _refuse(request, 422, "invalid_question", f"{where}: {problem}")
        report_id = webhook_id or idempotency_key
        outcome = await gate.deliver(
            request,
            deliverer.complete(claims, completion, delivery_id=uuid4().hex, report_id=report_id),
            f"a completion of operation {operation_id!r}",
        )
        if isinstance(outcome, JSONResponse):
            return outcome
        log.info(
            "delivered %s completion of operation %s to run %s: now %s",
            completion.status,
            operation_id,
            claims.workflow_id,
            outcome.status,
        )
        app.state.accepted.labels(endpoint="complete").inc()
        return Accepted(operation_id=operation_id, operation_status=outcome.status)

    @app.post(
        DECISION_PATH,
        response_model=DecisionAccepted,
        response_description="Accepted: the run applied the decision.",
        responses=_error_responses(
            {
                401: "Missing, malformed or forged token, a token for another request, or a "
                "nonce the run does not know.",
                403: "The token is a one-click link's, for the other decision.",
                404: "No such run, or the run has no such approval request.",
                409: "Not applied: the request is already decided or has expired, this is a "
                "duplicate of a decision already applied, or the run has ended. Do not retry.",
                422: "The body is not JSON, or not a valid decision.",
            }
        ),
        operation_id="decide_approval",
        summary="Decide on an approval request",
        description="A person approves or rejects what a run asked to do, through the token "
        "of the request's links.",
        openapi_extra=_json_body(DecisionBody),
    )
    async def decide(
        request_id: str,
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    ) -> DecisionAccepted | JSONResponse:
        admitted = await gate.admit(
            request,
            credentials,
            subject=frozenset(
                approval_subject(request_id, kind) for kind in (None, "approve", "reject")
            ),
            subject_kind="request",
            model=DecisionBody,
            invalid_code="invalid_decision",
        )
        if isinstance(admitted, JSONResponse):
            return admitted
        claims, decision = admitted
        if claims.operation_id not in (
            approval_subject(request_id),
            approval_subject(request_id, decision.decision),
        ):
            # A one-click link (approve, say) allows its own decision only.
            return _refuse(
                request,
                403,
                "decision_not_allowed",
                f"this link's token does not allow the decision {decision.decision!r}",
            )
        outcome = await gate.deliver(
            request,
            deliverer.decide(claims, request_id, decision),
            f"a decision on request {request_id!r}",
        )
        if isinstance(outcome, JSONResponse):
            return outcome
        if not outcome.accepted:
            # The run recorded the decision without applying it: retrying cannot help.
            reason = outcome.reason or f"the request is {outcome.status}"
            return _refuse(request, 409, "not_accepted", reason)
        log.info(
            "delivered %s by %r on request %s to run %s: now %s",
            decision.decision,
            decision.reviewer,
            request_id,
            claims.workflow_id,
            outcome.status,
        )
        app.state.accepted.labels(endpoint="decision").inc()
        return DecisionAccepted(request_id=request_id, approval_status=outcome.status)

    @app.post(
        ANSWER_PATH,
        response_model=AnswerAccepted,
        response_description="Accepted: the run applied the answer and handed it to the job; "
        "`delivered` says whether the job took it.",
        responses=_error_responses(
            {
                401: "Missing, malformed or forged token, a token for another question, or a "
                "nonce the run does not know.",
                403: "The tool's policy gives this question to the model, not to a person.",
                404: "No such run, or the run has no such question.",
                409: "Not applied: the question is already answered, declined, expired or "
                "cancelled (by another answer), or the run has ended. Do not retry.",
                422: "The body is not JSON, or not a valid answer: an `accept` carries content "
                "matching the question's `requested_schema`, a `decline` none.",
            }
        ),
        operation_id="answer_question",
        summary="Answer an operation's question",
        description="A person answers a question a long operation's job asked (or declines "
        "to), through the token of the question's link. The gateway replies once the run has "
        "handed the answer to the job: `delivered` says whether the job took it. Copies of an "
        "answer (a link used twice, a retry with the same body) are applied once and get its "
        "outcome.",
        openapi_extra=_json_body(AnswerBody),
    )
    async def answer(
        question_id: str,
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    ) -> AnswerAccepted | JSONResponse:
        admitted = await gate.admit(
            request,
            credentials,
            subject=question_subject(question_id),
            subject_kind="question",
            model=AnswerBody,
            invalid_code="invalid_answer",
        )
        if isinstance(admitted, JSONResponse):
            return admitted
        claims, body = admitted
        outcome = await gate.deliver(
            request,
            deliverer.answer(claims, question_id, body),
            f"an answer to question {question_id!r}",
        )
        if isinstance(outcome, JSONResponse):
            return outcome
        if not outcome.accepted:
            # The run recorded the answer without applying it: retrying cannot help.
            reason = outcome.reason or f"the question is {outcome.status}"
            return _refuse(request, 409, "not_accepted", reason)
        log.info(
            "delivered %s by %r to question %s of run %s: now %s, %s",
            body.action,
            body.responder,
            question_id,
            claims.workflow_id,
            outcome.status,
            "the job has it" if outcome.delivered else f"the job refused it: {outcome.reason}",
        )
        app.state.accepted.labels(endpoint="answer").inc()
        return AnswerAccepted(
            question_id=question_id,
            question_status=outcome.status,
            delivered=outcome.delivered,
            reason=outcome.reason,
        )

    @app.get("/healthz", summary="Liveness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _refuse(request, 422, "invalid_request", _describe(exc.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        response = _refuse(request, exc.status_code, _code_for(exc.status_code), exc.detail)
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        # Only bugs get here: every refusal above is answered on purpose.
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, "internal_error", "the gateway failed; retry later")

    return app


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


def redact(text: str) -> str:
    """`text` fit for a log line: what is shaped like a resume token or a piece of one, and the
    value of every query parameter (`?token=...`), replaced by `[redacted]`."""
    text = _QUERY_VALUE.sub(rf"\g<1>{REDACTED}", text)
    return _TOKENISH.sub(REDACTED, text)


class RedactTokens(logging.Filter):
    """Redacts every log record it sees, for the loggers of the server the app runs in:
    uvicorn's access log prints each request's path with its query string. A path (an argument
    that starts with `/`) loses its query string whole (the gateway takes none: one is a token
    sent as `?token=`, or noise); the rest goes through `redact`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(arg) for arg in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {key: _redact_arg(arg) for key, arg in record.args.items()}
        return True


def _redact_arg(arg: object) -> object:
    if not isinstance(arg, str):
        return arg
    path, question_mark, _ = arg.partition("?")
    if arg.startswith("/") and question_mark:
        return f"{redact(path)}?{REDACTED}"
    return redact(arg)


def _refuse(request: Request, status: int, code: str, message: str) -> JSONResponse:
    # %r: the path is the caller's text, and a decoded %0A must not forge a log line.
    path = redact(request.url.path)
    log.info("refused %s %r: %d %s: %s", request.method, path, status, code, message)
    request.app.state.refusals.labels(code=code, status=str(status)).inc()
    response = _error(status, code, message)
    if status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _error(status: int, code: str, message: str) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message))
    return JSONResponse(body.model_dump(), status_code=status)


def _code_for(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "refused"


def _describe(errors: Iterable[Any]) -> str:
    """Pydantic errors as one line: `error.code: Field required; ...`."""
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ())) or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"
