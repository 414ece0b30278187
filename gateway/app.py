"""The webhook gateway: external systems report on long operations here.

    POST /v1/operations/{operation_id}/complete
    Authorization: Bearer <resume token>
    {"status": "succeeded", "result": {...}}

Checks run cheapest first and bad input never reaches a run: body size (413), token (401,
410), body (422); only then is the completion delivered to the run (see `delivery`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from http import HTTPStatus
from typing import Annotated, Any, Literal
from uuid import uuid4

from fastapi import FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from gateway.delivery import Deliverer, DeliveryRefused
from gateway.tokens import ExpiredToken, InvalidToken, ResumeTokens
from schemas.operations import Completion, OperationStatus

log = logging.getLogger(__name__)

COMPLETE_PATH = "/v1/operations/{operation_id}/complete"
DEFAULT_MAX_BODY_BYTES = 1_048_576
_SCHEMA_REF = "#/components/schemas/{model}"


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


# Module-level, not inside create_app: FastAPI resolves the endpoint's (string) annotations in
# this module's globals. auto_error=False: a missing token is answered by the endpoint, after
# the size check.
_BEARER = HTTPBearer(
    auto_error=False,
    bearerFormat="resume token",
    description="The resume token the operation's callback was issued with.",
)

_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        401: "Missing, malformed or forged token, a token for another operation, or a nonce "
        "the run does not know.",
        404: "No such run, or the run has no such operation.",
        409: "Not applied: the operation is already resolved, expired or cancelled, this is a "
        "duplicate of a completion already applied, or the run has ended. Do not retry.",
        410: "The token has expired.",
        413: "The body is larger than the gateway accepts.",
        422: "The body is not JSON, or not a valid completion.",
        503: "Temporal or the run could not be reached in time. Retry later.",
    }.items()
}


class _GatewayAPI(FastAPI):
    def openapi(self) -> dict[str, Any]:
        # The complete endpoint reads its body itself (to cap its size before parsing), so
        # FastAPI does not know its model: the route's `openapi_extra` refers to it, and its
        # schema is added to the components here.
        schema = super().openapi()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        if "Completion" not in components:
            completion = Completion.model_json_schema(ref_template=_SCHEMA_REF)
            components.update(completion.pop("$defs", {}))
            components["Completion"] = completion
        return schema


def create_app(
    deliverer: Deliverer, tokens: ResumeTokens, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> FastAPI:
    """The gateway's ASGI app.

    Args:
        deliverer: Hands verified completions to runs (`TemporalDeliverer` in production).
        tokens: Verifies resume tokens.
        max_body_bytes: Larger bodies are refused with 413 before they are parsed.
    """
    app = _GatewayAPI(
        title="waitstate gateway",
        version="1",
        description="External systems report on the long operations of agent runs here.",
    )

    @app.post(
        COMPLETE_PATH,
        response_model=Accepted,
        response_description="Accepted: the run applied the completion.",
        responses=_ERROR_RESPONSES,
        operation_id="complete_operation",
        summary="Report on a long operation",
        description="An external system reports progress on a job, or its result or failure.",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Completion"}}
                },
            }
        },
    )
    async def complete(
        operation_id: str,
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
    ) -> Accepted | JSONResponse:
        try:
            body = await _read_body(request, max_body_bytes)
        except ClientDisconnect:
            return _refuse(request, 400, "client_disconnected", "the body was cut short")
        if body is None:
            return _refuse(
                request, 413, "body_too_large", f"the body is over {max_body_bytes} bytes"
            )

        if credentials is None:
            return _refuse(
                request, 401, "missing_token", "send Authorization: Bearer <resume token>"
            )
        try:
            claims = tokens.verify(credentials.credentials)
        except ExpiredToken as err:
            return _refuse(request, 410, "token_expired", str(err))
        except InvalidToken as err:
            return _refuse(request, 401, "invalid_token", str(err))
        if claims.operation_id != operation_id:
            return _refuse(
                request, 401, "wrong_operation", "token was issued for another operation"
            )

        try:
            completion = Completion.model_validate_json(body)
        except ValidationError as err:
            not_json = any(error["type"] == "json_invalid" for error in err.errors())
            code = "invalid_json" if not_json else "invalid_completion"
            return _refuse(request, 422, code, _describe(err.errors()))

        try:
            outcome = await deliverer.complete(claims, completion, delivery_id=uuid4().hex)
        except DeliveryRefused as err:
            code = err.code or _code_for(err.status_code)
            return _refuse(request, err.status_code, code, err.message)
        except Exception:
            # A bug, not a refusal. Answered here rather than by the app-wide handler, which
            # Starlette follows by re-raising into the server (a second traceback in the log).
            log.exception("delivering a completion of operation %r failed", operation_id)
            return _error(500, "internal_error", "the gateway failed; retry later")
        log.info(
            "delivered %s completion of operation %s to run %s: now %s",
            completion.status,
            operation_id,
            claims.workflow_id,
            outcome.status,
        )
        return Accepted(operation_id=operation_id, operation_status=outcome.status)

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


def _refuse(request: Request, status: int, code: str, message: str) -> JSONResponse:
    # %r: the path is the caller's text, and a decoded %0A must not forge a log line.
    log.info("refused %s %r: %d %s: %s", request.method, request.url.path, status, code, message)
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
