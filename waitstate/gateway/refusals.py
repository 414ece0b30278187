"""One way to answer a refusal. Whatever refuses a request (a check before delivery, the run,
FastAPI's validation of a header, Starlette's routing), the gateway answers it with `refuse`:
one log line (the path redacted), one count in `waitstate_gateway_refusals_total` by code and
status, and the error shape, `ErrorBody`.

Routes raise `Refused`; `install` gives the app a handler for it and for the framework's own
refusals and failures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from waitstate.auth.tokens import ExpiredToken, InvalidToken
from waitstate.gateway.redaction import redact

C = TypeVar("C")

# The name the gateway's request log has always had, whichever module writes a line: it is in
# every line `python -m waitstate.gateway` prints, and what operators' filters select.
REQUEST_LOG = "waitstate.gateway.app"
log = logging.getLogger(REQUEST_LOG)

_COMMON_ERRORS = {
    410: "The token has expired.",
    413: "The body is larger than the gateway accepts.",
    503: "Temporal or the run could not be reached, or did not take the request for now: "
    "nothing was recorded. Retry later.",
}
# The answer of a route that sends a run something, when the run did not answer in time.
OUTCOME_UNKNOWN = (
    "`outcome_unknown`: the run did not answer in time, after Temporal took the request in, so "
    "it may yet be applied (Temporal holds it until the run's worker takes it). Send it again "
    "(with the answer's `key`, if it gives one): the retry is answered with what became of it, "
    "and it is never applied twice."
)


class ErrorDetail(BaseModel):
    """Why a request was refused, or why its outcome is not known."""

    code: str = Field(description="Short snake_case reason, e.g. `token_expired`.")
    message: str = Field(description="For people: what was wrong and what to do.")
    key: str | None = Field(
        default=None,
        description="With `outcome_unknown`: the idempotency key the request was sent with "
        "(its own, or the one the gateway gave it): send the request again with it (a "
        "message's or start's `key`, a report's `Idempotency-Key` header), and it is answered "
        "as the same request, never applied twice.",
    )
    thread_id: str | None = Field(
        default=None,
        description="With `outcome_unknown` for a thread's start: the thread's id (the one the "
        "gateway picked, if the start named none), to send again with the `key`.",
    )


class ErrorBody(BaseModel):
    """Every error answer of the gateway."""

    error: ErrorDetail


class Refused(Exception):
    """A request refused on purpose, or whose outcome is unknown, answered with `status` and
    the error shape by `refuse`; `retry_with` adds what a retry must carry (`key`, and a
    start's `thread_id`) to the shape."""

    def __init__(
        self, status: int, code: str, message: str, retry_with: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_with = dict(retry_with or {})


def verified(verify: Callable[[str], C], token: str) -> C:
    """The claims `verify` (one of the token service's `verify_*`) finds in `token`.

    Raises:
        Refused: 410 the token has expired; 401 it is not genuine, or of another kind.
    """
    try:
        return verify(token)
    except ExpiredToken as err:
        raise Refused(410, "token_expired", str(err)) from None
    except InvalidToken as err:
        raise Refused(401, "invalid_token", str(err)) from None


class Failed(Exception):
    """A bug met while answering a request, logged where it was met: answered 500 with the error
    shape, and not counted (it is no refusal)."""


def install(app: FastAPI, registry: CollectorRegistry) -> None:
    """Count `app`'s refusals in `registry` and answer each of them, and its failures, with the
    error shape."""
    app.state.refusals = Counter(
        "waitstate_gateway_refusals",
        "Requests refused, by reason: bad tokens, malformed bodies, refused deliveries",
        ["code", "status"],
        registry=registry,
    )
    app.exception_handler(Refused)(_refused)
    app.exception_handler(Failed)(_failed)
    app.exception_handler(RequestValidationError)(_invalid_request)
    app.exception_handler(HTTPException)(_http_error)
    app.exception_handler(Exception)(_internal_error)


def refuse(
    request: Request,
    status: int,
    code: str,
    message: str,
    retry_with: Mapping[str, str] | None = None,
) -> JSONResponse:
    """Log and count a refusal of `request`, and answer it (with `retry_with`'s fields)."""
    # %r: the path is the caller's text, and a decoded %0A must not forge a log line.
    path = redact(request.url.path)
    log.info("refused %s %r: %d %s: %s", request.method, path, status, code, message)
    request.app.state.refusals.labels(code=code, status=str(status)).inc()
    response = _error(status, code, message, retry_with)
    if status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def code_for(status: int) -> str:
    """The error code of a refusal that comes with none: its status's phrase, `not_found`."""
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "refused"


def describe(errors: Iterable[Any]) -> str:
    """Pydantic errors as one line: `error.code: Field required; ...`."""
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ())) or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def error_responses(descriptions: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """A route's error answers for OpenAPI: its own descriptions, and those of every route
    (where it gives none of its own for their status)."""
    merged = {**_COMMON_ERRORS, **descriptions}
    return {
        status: {"model": ErrorBody, "description": merged[status]} for status in sorted(merged)
    }


async def _refused(request: Request, exc: Refused) -> JSONResponse:
    return refuse(request, exc.status, exc.code, exc.message, exc.retry_with)


async def _failed(request: Request, exc: Failed) -> JSONResponse:
    return _error(500, "internal_error", "the gateway failed; retry later")


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    return refuse(request, 422, "invalid_request", describe(exc.errors()))


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    response = refuse(request, exc.status_code, code_for(exc.status_code), exc.detail)
    response.headers.update(exc.headers or {})
    return response


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    # Only bugs get here: every refusal is answered on purpose. Starlette re-raises into the
    # server after this answer (a second traceback in the log): a bug met where it can be
    # logged with what it was about is raised as `Failed` instead.
    log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return _error(500, "internal_error", "the gateway failed; retry later")


def _error(
    status: int, code: str, message: str, retry_with: Mapping[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message, **(retry_with or {})))
    # Fields that are not set are left out: an error is `{code, message}` unless it says more.
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status)
