"""What every adapter of the demo systems shares: how an HTTP answer becomes a result, a
`ToolError` the model reads, or an exception Temporal retries; and the job services' start,
status and cancel by idempotency key."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from waitstate import Completion, Job, OperationError, StartContext, ToolError

# Answers a retry may fix, though they are 4xx: timeout, conflict (a request with the same key
# still in flight), rate limit.
RETRYABLE_CLIENT_ERRORS = frozenset({408, 409, 429})


class ServiceError(Exception):
    """A demo system failed in a way a retry may fix (5xx, rate limit, connection...).

    Deliberately not a `ToolError`: it propagates, so the activity's retry policy applies, and
    the idempotency key makes a retried start safe.
    """

    def __init__(self, service: str, status_code: int, message: str) -> None:
        super().__init__(f"{service} answered {status_code}: {message}")
        self.status_code = status_code


def check_answer(response: httpx.Response, service: str) -> Any:
    """The answer's JSON body, or the error it stands for.

    Raises:
        ToolError: a 4xx refusal; its message is the service's, for the model to act on.
        ServiceError: a 5xx answer or a retryable 4xx (408, 409, 429).
    """
    if response.is_success:
        return response.json() if response.content else None
    message = error_message(response)
    if response.status_code >= 500 or response.status_code in RETRYABLE_CLIENT_ERRORS:
        raise ServiceError(service, response.status_code, message)
    raise ToolError(f"{service}: {message}")


def error_message(response: httpx.Response) -> str:
    """What a service said went wrong: FastAPI's `detail`, one line per invalid field."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return response.text[:500] or response.reason_phrase
    if isinstance(detail, list):
        # Request validation: [{"loc": ["body", "period"], "msg": "..."}]
        return "; ".join(
            f"{'.'.join(str(part) for part in item.get('loc', [])[1:]) or 'request'}: "
            f"{item.get('msg', '')}"
            for item in detail
            if isinstance(item, dict)
        )
    return str(detail) if detail is not None else response.reason_phrase


def job_completion(body: dict[str, Any], service: str) -> Completion:
    """A job's state as the demo systems report it (a Completion plus `cancelled`)."""
    if body.get("status") == "cancelled":
        # Not a Completion status: the job will never finish, so it ends the operation as failed,
        # with a reason.
        return _failed("cancelled", f"the {service} job was cancelled", retryable=False)
    return Completion.model_validate(
        {name: body.get(name) for name in ("status", "result", "result_ref", "error", "progress")}
    )


def unknown_job(service: str, job_id: str, message: str) -> Completion:
    """The state of a job the service does not know (lost, or never its own): failed."""
    return _failed(
        "job_unknown",
        f"the {service} no longer knows job {job_id} ({message}); start it again",
        retryable=True,
    )


def _failed(code: str, message: str, *, retryable: bool) -> Completion:
    return Completion(
        status="failed",
        error=OperationError(code=code, message=message, retryable=retryable),
    )


def job_url(base_url: str, path: str, job_id: str) -> str:
    """`{base_url}{path}/{job_id}`, with the job id escaped (it comes from workflow state)."""
    return f"{base_url}{path}/{quote(job_id, safe='')}"


class SystemsClient:
    """What every adapter of the demo systems holds: the client it calls them with, and where.

    Args:
        http: The client to call the systems with (its owner closes it).
        base_url: The systems' root, e.g. `http://127.0.0.1:8790`.
    """

    def __init__(self, http: httpx.AsyncClient, base_url: str) -> None:
        self._http = http
        self._base_url = base_url.rstrip("/")


class JobService(SystemsClient):
    """What the demo's job services share: start by idempotency key, check, cancel.

    Subclasses name the service and the path of its jobs, and say how a job starts.
    """

    service = "job service"
    jobs_path = "/jobs"

    async def _start(
        self, path: str, body: dict[str, Any], context: StartContext, *, calls_back: bool = False
    ) -> Job:
        """POST `body` to `path` under the context's idempotency key; with `calls_back`, the
        context's callback URL and token too, when it has them."""
        if calls_back and context.callback_url is not None:
            body = {
                **body,
                "callback_url": context.callback_url,
                "callback_token": context.callback_token,
            }
        response = await self._http.post(
            f"{self._base_url}{path}",
            json=body,
            headers={"Idempotency-Key": context.idempotency_key},
        )
        accepted = check_answer(response, self.service)
        return Job(job_id=accepted["job_id"], eta_seconds=accepted.get("eta_seconds"))

    async def status(self, job_id: str) -> Completion:
        """The job's state (with progress while it runs); one the service does not know is a
        failure with a reason."""
        response = await self._http.get(job_url(self._base_url, self.jobs_path, job_id))
        if response.status_code == 404:
            return unknown_job(self.service, job_id, error_message(response))
        return job_completion(check_answer(response, self.service), self.service)

    async def cancel(self, job_id: str) -> None:
        """Cancel the job; one the service does not know has nothing left to cancel."""
        response = await self._http.post(
            f"{job_url(self._base_url, self.jobs_path, job_id)}/cancel"
        )
        if response.status_code != 404:
            check_answer(response, self.service)
