"""The gateway end to end: the real app over HTTP, a real `TemporalDeliverer`, the dev server, a
worker with the production wiring, and the demo systems as the external systems.

What `test_app.py` and `test_approvals.py` prove fast against stand-ins, proved here against
runs that really wait: what a refused request answers, that it adds nothing to the run's
history, and that what is accepted is applied once. The export service is told never to
finish its jobs, so each test sends the webhook itself, with the token the service was handed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from examples.systems import serving
from tests.helpers import (
    MALFORMED_COMPLETIONS,
    accepted_updates,
    assert_error,
    eventually,
    quiet_history_length,
    random_request,
)
from tests.rigs import (
    EXPORT_TASK,
    EXPORT_TOOLS,
    MAX_BODY,
    REFUND_TASK,
    REFUND_TOOLS,
    Stack,
    serving_stack,
)
from waitstate.auth.tokens import ResumeTokens, approval_subject
from waitstate.client._updates import decision_update_id
from waitstate.gateway.app import create_app as gateway_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.schemas import RunResult, RunState
from waitstate.schemas.approvals import ApprovalRequest, DecisionBody
from waitstate.workflows.agent_run import AgentRunWorkflow

KEYS = {"real": "r" * 40}
RESULT_WITHIN = 60.0  # far more than a run takes: only turns a hang into a failure
# A valid body for each endpoint, to send with tokens that must be refused.
SUCCEEDED = {"status": "succeeded", "result": {"file": "exports/transactions-2025-Q3.csv"}}
APPROVE = {"decision": "approve", "reviewer": "ana", "comment": "fine by me"}


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    async with serving_stack(
        dev_env.client, task_queue, KEYS, "real", max_body_bytes=MAX_BODY, within=30
    ) as stack:
        await stack.faults(never_complete=True)
        yield stack


async def _state(handle: WorkflowHandle[Any, Any]) -> RunState:
    state: RunState = await handle.query(AgentRunWorkflow.status)
    return state


async def _result(handle: WorkflowHandle[Any, RunResult]) -> RunResult:
    return await asyncio.wait_for(handle.result(), RESULT_WITHIN)


def _answers(responses: Sequence[httpx.Response]) -> list[tuple[int, str | None]]:
    """(status, error code) of each response, sorted: 200s first."""
    return sorted(
        (r.status_code, None if r.status_code == 200 else r.json()["error"]["code"])
        for r in responses
    )


def _assert_each_refused(
    answers: Sequence[tuple[str, httpx.Response]], cases: Sequence[tuple[str, Any, Any, int, str]]
) -> None:
    """Each of `answers` (what was sent, and its response) is refused with the status and code
    of its case, `(what, body, authorization, status, code)`; a 401 asks for a bearer token."""
    for (what, response), (_, _, _, status, code) in zip(answers, cases, strict=True):
        assert (what, response.status_code, response.json()["error"]["code"]) == (
            what,
            status,
            code,
        )
        if status == 401:
            assert response.headers["www-authenticate"] == "Bearer"


async def _concurrently(
    send: Callable[[], Awaitable[httpx.Response]], times: int
) -> list[httpx.Response]:
    return list(await asyncio.gather(*(send() for _ in range(times))))


def _bearer(token: str) -> str:
    return f"Bearer {token}"


def _forged(token: str) -> str:
    return _bearer(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1])


# --- Completions --------------------------------------------------------------------------


async def test_each_report_is_applied_and_answered_with_the_operations_status(rig: Stack) -> None:
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS)
        [job] = await rig.jobs(handle, 1)
        assert job.callback_url is not None and job.callback_token is not None
        auth = _bearer(job.callback_token)
        reports = [
            await rig.post(job.callback_url, {"status": "running", "progress": "40%"}, auth),
            await rig.post(job.callback_url, {"status": "running", "progress": "80%"}, auth),
        ]
        state = await _state(handle)
        result_body = {"file": "exports/transactions-2025-Q3.csv", "rows": 7}
        final = await rig.post(
            job.callback_url, {"status": "succeeded", "result": result_body}, auth
        )
        result = await _result(handle)
        ended = (await _state(handle)).operations
    [operation] = state.operations.values()

    assert [r.json() for r in reports] == [
        {
            "status": "accepted",
            "operation_id": operation.operation_id,
            "operation_status": "running",
        }
    ] * 2
    assert operation.progress == "80%", "both reports were applied, in order"
    assert final.json() == {
        "status": "accepted",
        "operation_id": operation.operation_id,
        "operation_status": "succeeded",
    }
    assert result.status == "completed"
    succeeded = ended[operation.operation_id]
    assert (succeeded.status, succeeded.result) == ("succeeded", result_body)
    assert await accepted_updates(handle) == ["complete_operation"] * 3


async def test_identical_completions_apply_once_and_later_ones_get_409(rig: Stack) -> None:
    async with rig.worker():
        # Two exports in one turn: the run keeps waiting for the second while the first is
        # reported on again and again.
        handle = await rig.start(EXPORT_TASK, ["start_export"], model="scripted:two-exports")
        first, second = await rig.jobs(handle, 2)
        url, token = first.callback_url, first.callback_token
        assert url and token and second.callback_url and second.callback_token
        succeeded = {"status": "succeeded", "result": {"rows": 1}}
        burst = await _concurrently(lambda: rig.post(url, succeeded, _bearer(token)), 5)
        different = await rig.post(
            url,
            {"status": "failed", "error": {"code": "late", "message": "changed its mind"}},
            _bearer(token),
        )
        last = await rig.post(second.callback_url, succeeded, _bearer(second.callback_token))
        result = await _result(handle)
        after_the_end = await rig.post(url, {"status": "running"}, _bearer(token))

    assert _answers(burst) == [(200, None)] + [(409, "duplicate_completion")] * 4
    assert_error(different, 409, "operation_resolved")
    assert last.status_code == 200
    assert result.status == "completed"
    assert_error(after_the_end, 409, "run_ended")
    assert await accepted_updates(handle) == ["complete_operation"] * 2, "one per operation"


async def test_refused_completions_never_reach_the_run(
    rig: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS)
        [job] = await rig.jobs(handle, 1)
        assert job.callback_url is not None and job.callback_token is not None
        [operation] = (await _state(handle)).operations.values()
        url, genuine = job.callback_url, job.callback_token
        path = url.removeprefix(rig.gateway_url)

        def mint(subject: str, **claims: Any) -> str:
            expires_at = claims.pop("expires_at", operation.expires_at)
            workflow_id = claims.pop("workflow_id", handle.id)
            return _bearer(rig.tokens.mint(workflow_id, subject, expires_at, **claims).token)

        other_key = ResumeTokens({"other": "o" * 40}, "other")
        # (what, body or raw bytes, Authorization header, expected status, expected code)
        cases: list[tuple[str, Any, str | None, int, str]] = [
            ("no token", SUCCEEDED, None, 401, "missing_token"),
            ("empty bearer", SUCCEEDED, "Bearer", 401, "missing_token"),
            ("basic auth", SUCCEEDED, "Basic dXNlcjpwYXNz", 401, "missing_token"),
            ("not a token", SUCCEEDED, "Bearer not-a-token", 401, "invalid_token"),
            ("forged signature", SUCCEEDED, _forged(genuine), 401, "invalid_token"),
            (
                "unknown key",
                SUCCEEDED,
                _bearer(
                    other_key.mint(handle.id, operation.operation_id, operation.expires_at).token
                ),
                401,
                "invalid_token",
            ),
            ("another operation", SUCCEEDED, mint("op_other"), 401, "wrong_operation"),
            (
                "expired",
                SUCCEEDED,
                mint(operation.operation_id, expires_at=datetime(2020, 1, 1, tzinfo=UTC)),
                410,
                "token_expired",
            ),
            (
                "too large",
                {"status": "succeeded", "result": "x" * MAX_BODY},
                _bearer(genuine),
                413,
                "body_too_large",
            ),
            ("too large, no token", {"result": "x" * MAX_BODY}, None, 413, "body_too_large"),
            ("auth before the body", b"not json", None, 401, "missing_token"),
            *(
                (f"malformed {body!r}", body, _bearer(genuine), 422, code)
                for body, code, _ in MALFORMED_COMPLETIONS
            ),
            # Past the gateway's checks, refused by the run's validator.
            (
                "a nonce the run did not choose",
                SUCCEEDED,
                mint(operation.operation_id, nonce="n" * 22),
                401,
                "nonce_mismatch",
            ),
        ]
        before = await quiet_history_length(handle)
        with caplog.at_level(logging.INFO, logger="waitstate.gateway.app"):
            answers = [
                (what, await _send(rig.http, url, body, authorization))
                for what, body, authorization, _, _ in cases
            ]
            chunked = await rig.http.post(
                url, content=_chunks(MAX_BODY * 2), headers={"Authorization": _bearer(genuine)}
            )
            unknown_operation = await rig.post(
                f"{rig.gateway_url}/v1/operations/op_unknown/complete",
                SUCCEEDED,
                mint("op_unknown"),
            )
            lying = await _lying_content_length(rig.gateway, path, genuine)
        after = await quiet_history_length(handle)
        accepted = await rig.post(url, SUCCEEDED, _bearer(genuine))
        unknown_run = await rig.post(
            f"{rig.gateway_url}/v1/operations/op_1/complete",
            SUCCEEDED,
            mint("op_1", workflow_id=f"no-such-run-{uuid.uuid4()}"),
        )
        result = await _result(handle)

    _assert_each_refused(answers, cases)
    assert_error(chunked, 413, "body_too_large")
    assert_error(unknown_operation, 404, "operation_unknown")
    assert_error(lying, 413, "body_too_large")
    assert after == before, "refused requests add nothing to the run's history"
    assert genuine not in caplog.text and genuine.split(".")[1] not in caplog.text
    assert accepted.status_code == 200, "and the run still takes the genuine webhook"
    assert await accepted_updates(handle) == ["complete_operation"]
    assert result.status == "completed"
    assert_error(unknown_run, 404, "unknown_run")


async def test_random_requests_never_get_a_5xx_from_a_real_run(rig: Stack) -> None:
    rng = random.Random(20240611)
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS)
        [job] = await rig.jobs(handle, 1)
        assert job.callback_token is not None
        [operation] = (await _state(handle)).operations.values()
        genuine = job.callback_token

        def token(expires_in: timedelta) -> str:
            expires_at = datetime.now(UTC) + expires_in
            return rig.tokens.mint(handle.id, operation.operation_id, expires_at).token

        statuses = set()
        for _ in range(150):
            url, content, headers = random_request(
                rng, genuine, token, [operation.operation_id, "op_2"], MAX_BODY
            )
            response = await rig.http.post(
                f"{rig.gateway_url}{url}", content=content, headers=headers
            )

            assert response.status_code < 500, (response.status_code, response.text)
            if response.status_code != 200:
                assert_error(response, response.status_code)
            statuses.add(response.status_code)

    assert {401, 413, 422} <= statuses


# --- Decisions ----------------------------------------------------------------------------


async def test_a_decision_through_a_link_is_applied_once(rig: Stack) -> None:
    async with rig.worker():
        # Two refunds over the threshold in one turn: two requests, so the run keeps waiting
        # for the second while the first one's link is used again and again.
        handle = await rig.start("two refunds", REFUND_TOOLS, model="scripted:two-refunds")
        notices = await rig.notices(handle, 2)
        first, second = sorted(notices, key=lambda n: n["arguments"]["claim_id"])
        link, other = first["decision"], second["decision"]
        burst = await _concurrently(
            lambda: rig.post(link["url"], APPROVE, link["authorization"]), 5
        )
        again = await rig.post(link["url"], {"decision": "reject"}, link["authorization"])
        rejected = await rig.post(other["url"], {"decision": "reject"}, other["authorization"])
        result = await _result(handle)
        state = await _state(handle)
        # Not a copy of the first (that would get the first one's outcome): a new decision.
        after_the_end = await rig.post(
            link["url"], {**APPROVE, "reviewer": "late"}, link["authorization"]
        )
    approved = state.approvals[first["request_id"]].decision
    defaults = state.approvals[second["request_id"]].decision

    assert _answers(burst) == [(200, None)] + [(409, "duplicate_decision")] * 4
    assert next(r for r in burst if r.status_code == 200).json() == {
        "status": "accepted",
        "request_id": first["request_id"],
        "approval_status": "approved",
    }
    assert approved is not None and (approved.reviewer, approved.comment) == ("ana", "fine by me")
    assert_error(again, 409, "approval_decided")
    assert rejected.json()["approval_status"] == "rejected"
    assert defaults is not None and (defaults.reviewer, defaults.comment) == ("unknown", "")
    assert result.status == "completed"
    assert [r.claim_id for r in rig.systems.refunds] == ["C-118"], "the approved one, once"
    assert_error(after_the_end, 409, "run_ended")
    assert await accepted_updates(handle) == ["decide", "decide"]


async def test_a_one_click_link_allows_its_own_decision_only(rig: Stack) -> None:
    async with rig.worker():
        handle = await rig.start("two refunds", REFUND_TOOLS, model="scripted:two-refunds")
        notices = await rig.notices(handle, 2)
        first, second = sorted(notices, key=lambda n: n["arguments"]["claim_id"])
        approve, reject = first["links"]["approve"], first["links"]["reject"]
        before = await accepted_updates(handle)
        crossed = await rig.post(reject["url"], APPROVE, reject["authorization"])
        also_crossed = await rig.post(
            approve["url"], {"decision": "reject"}, approve["authorization"]
        )
        refused_added = await accepted_updates(handle)
        approved = await rig.post(approve["url"], approve["body"], approve["authorization"])
        other = second["links"]["reject"]
        rejected = await rig.post(other["url"], other["body"], other["authorization"])
        result = await _result(handle)
        state = await _state(handle)

    assert_error(crossed, 403, "decision_not_allowed")
    assert_error(also_crossed, 403, "decision_not_allowed")
    assert refused_added == before == [], "a refused link reaches no run"
    assert approved.json()["approval_status"] == "approved"
    assert rejected.json()["approval_status"] == "rejected"
    assert state.approvals[first["request_id"]].status == "approved"
    assert state.approvals[second["request_id"]].status == "rejected"
    assert result.status == "completed"
    assert [r.claim_id for r in rig.systems.refunds] == ["C-118"]


async def test_refused_decisions_never_reach_the_run(rig: Stack) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        [notice] = await rig.notices(handle, 1)
        request: ApprovalRequest = (await _state(handle)).approvals[notice["request_id"]]
        link = notice["decision"]
        url, genuine = link["url"], link["authorization"].removeprefix("Bearer ")
        request_id = request.request_id
        subject = approval_subject(request_id)

        def mint(subject: str, **claims: Any) -> str:
            expires_at = claims.pop("expires_at", request.expires_at)
            workflow_id = claims.pop("workflow_id", handle.id)
            return _bearer(rig.tokens.mint(workflow_id, subject, expires_at, **claims).token)

        cases: list[tuple[str, Any, str | None, int, str]] = [
            ("no token", APPROVE, None, 401, "missing_token"),
            ("basic auth", APPROVE, "Basic dXNlcjpwYXNz", 401, "missing_token"),
            ("not a token", APPROVE, "Bearer not-a-token", 401, "invalid_token"),
            ("forged signature", APPROVE, _forged(genuine), 401, "invalid_token"),
            ("an operation's token", APPROVE, mint("op_1"), 401, "wrong_request"),
            ("named like the request", APPROVE, mint(request_id), 401, "wrong_request"),
            ("another request", APPROVE, mint(approval_subject("apr_2")), 401, "wrong_request"),
            (
                "expired",
                APPROVE,
                mint(subject, expires_at=datetime(2020, 1, 1, tzinfo=UTC)),
                410,
                "token_expired",
            ),
            (
                "too large",
                {**APPROVE, "comment": "x" * MAX_BODY},
                _bearer(genuine),
                413,
                "body_too_large",
            ),
            ("too large, no token", {"comment": "x" * MAX_BODY}, None, 413, "body_too_large"),
            ("auth before the body", b"not json", None, 401, "missing_token"),
            ("not json", b"not json", _bearer(genuine), 422, "invalid_json"),
            ("empty", b"", _bearer(genuine), 422, "invalid_json"),
            ("cut short", b'{"decision": "approve",', _bearer(genuine), 422, "invalid_json"),
            ("not an object", [], _bearer(genuine), 422, "invalid_decision"),
            ("unknown decision", {"decision": "maybe"}, _bearer(genuine), 422, "invalid_decision"),
            ("no decision", {"reviewer": "ana"}, _bearer(genuine), 422, "invalid_decision"),
            (
                "reviewer too long",
                {"decision": "approve", "reviewer": "r" * 201},
                _bearer(genuine),
                422,
                "invalid_decision",
            ),
            # Past the gateway's checks, refused by the run's validator.
            (
                "a nonce the run did not choose",
                APPROVE,
                mint(subject, nonce="n" * 22),
                401,
                "nonce_mismatch",
            ),
        ]
        before = await quiet_history_length(handle)
        answers = [
            (what, await _send(rig.http, url, body, authorization))
            for what, body, authorization, _, _ in cases
        ]
        unknown_request = await rig.post(
            f"{rig.gateway_url}/v1/approvals/apr_unknown/decision",
            APPROVE,
            mint(approval_subject("apr_unknown")),
        )
        # An approval link's token at the operations endpoint: its subject is no operation id.
        at_operations = [
            await rig.post(
                f"{rig.gateway_url}/v1/operations/{operation_id}/complete",
                SUCCEEDED,
                _bearer(genuine),
            )
            for operation_id in (request_id, f"approval%2F{request_id}")
        ]
        after = await quiet_history_length(handle)
        accepted = await rig.post(url, APPROVE, _bearer(genuine))
        unknown_run = await rig.post(
            url, APPROVE, mint(subject, workflow_id=f"no-such-run-{uuid.uuid4()}")
        )
        result = await _result(handle)

    _assert_each_refused(answers, cases)
    assert_error(unknown_request, 404, "approval_unknown")
    assert_error(at_operations[0], 401, "wrong_operation")
    assert_error(at_operations[1], 404, "not_found")
    assert after == before, "refused requests add nothing to the run's history"
    assert accepted.status_code == 200, "and the run still takes the genuine decision"
    assert result.status == "completed" and len(rig.systems.refunds) == 1
    assert_error(unknown_run, 404, "unknown_run")


async def test_a_decision_while_the_worker_is_down_is_unknown_and_its_retry_applies_once(
    rig: Stack, dev_env: WorkflowEnvironment
) -> None:
    # A gateway that waits 2 s for the run, not 20: the run's worker is down, so it never
    # answers in time.
    impatient = gateway_app(
        TemporalDeliverer(dev_env.client, timeout=timedelta(seconds=2)), rig.tokens
    )
    async with serving(impatient) as impatient_url:
        async with rig.worker():
            handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
            [notice] = await rig.notices(handle, 1)
            await quiet_history_length(handle)
        link = notice["decision"]
        url = link["url"].replace(rig.gateway_url, impatient_url)
        unanswered = await rig.post(url, APPROVE, link["authorization"])
        async with rig.worker():
            retried = await rig.post(url, APPROVE, link["authorization"])
            result = await _result(handle)

    assert_error(unanswered, 504, "outcome_unknown")
    # Temporal may still hand the first request's Update to the worker when it is back: then
    # the retry is its copy and gets 409. Either way the decision is applied once.
    assert (retried.status_code, retried.json().get("error", {}).get("code")) in {
        (200, None),
        (409, "duplicate_decision"),
    }
    assert result.status == "completed"
    assert len(rig.systems.refunds) == 1
    assert await accepted_updates(handle) == ["decide"]


async def test_a_decision_in_flight_when_its_run_ends_gets_409_run_ended(rig: Stack) -> None:
    # Temporal refuses an Update whose run ends while it waits with NOT_FOUND, as it refuses one
    # for a run that never was; the gateway tells them apart by describing the run.
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        [notice] = await rig.notices(handle, 1)
    # No worker: the decision's Update is taken in by Temporal, and waits for one.
    link = notice["decision"]
    decision = asyncio.create_task(rig.post(link["url"], APPROVE, link["authorization"]))
    update_id = decision_update_id(notice["request_id"], DecisionBody.model_validate(APPROVE))
    await eventually(lambda: _admitted(rig.client, handle.id, update_id), "the Update in flight")
    await handle.terminate("the run ends with a decision in flight")
    in_flight = await asyncio.wait_for(decision, RESULT_WITHIN)
    description = await handle.describe()

    assert description.status == WorkflowExecutionStatus.TERMINATED
    assert_error(in_flight, 409, "run_ended")
    assert rig.systems.refunds == []
    assert await accepted_updates(handle) == []


async def _admitted(client: Client, workflow_id: str, update_id: str) -> bool:
    """Whether Temporal has taken in the run's Update `update_id` (not yet accepted: no worker
    has seen it)."""
    stage = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=workflow_id), update_id=update_id
        ),
        wait_policy=WaitPolicy(lifecycle_stage=stage),
    )
    try:
        await client.workflow_service.poll_workflow_execution_update(
            request, timeout=timedelta(seconds=1)
        )
    except RPCError:  # not taken in yet
        return False
    return True


async def _send(
    http: httpx.AsyncClient, url: str, body: Any, authorization: str | None
) -> httpx.Response:
    """POST `body`: bytes as they are, anything else as JSON."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    return await http.post(url, content=content, headers=headers)


async def _chunks(size: int) -> AsyncIterator[bytes]:
    # No Content-Length to check: the gateway counts what it reads.
    yield b'{"status": "succeeded", "result": "'
    for _ in range(size // 1024):
        yield b"x" * 1024
    yield b'"}'


async def _lying_content_length(app: FastAPI, path: str, token: str) -> httpx.Response:
    # An HTTP server holds a client to its Content-Length, so the lie is sent straight to the
    # ASGI app: the header says 10 bytes, the body is over the limit.
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return await client.post(
            path,
            content=b"x" * (MAX_BODY * 2),
            headers={"Authorization": _bearer(token), "Content-Length": "10"},
        )
