"""What the tests of a person's replies through links (decisions in `test_approvals.py`, answers
in `test_questions.py`) share: the one reply the gateway delivered, the refusals every reply
route answers before the run is asked, and a stand-in for the Temporal client behind
`TemporalDeliverer` (alone, or behind the real app), with the refusals Temporal gives whatever the
Update."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, Generic, TypeVar, cast

import httpx
import pytest
from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from tests.helpers import assert_error, not_json
from tests.rigs import GATEWAY_SECRET, MAX_BODY, OP, RUN, Gateway, bearer
from waitstate.auth.tokens import ResumeClaims, ResumeTokens
from waitstate.gateway.app import create_app
from waitstate.gateway.delivery import TemporalDeliverer


def the_one_reply(
    delivered: list[tuple[ResumeClaims, str, Any]], subject: str, reply_to: str
) -> Any:
    """The body of the one reply the recording deliverer took (its `decisions` or `answers`),
    once checked that it came with the claims of a link's token for `subject` and was to
    `reply_to`."""
    [(claims, to, body)] = delivered
    assert (claims.workflow_id, claims.operation_id, claims.key_id) == (RUN, subject, "k1")
    assert claims.nonce
    assert to == reply_to
    return body


# --- Refused before the run is asked -----------------------------------------------------------


def forged(gw: Gateway) -> dict[str, str]:
    """A token of the gateway's with one character of its signature changed."""
    token = gw.token()
    return bearer(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1])


@dataclass(frozen=True)
class Refusal:
    """A request a route refuses before the run is asked: its headers (given the gateway) and
    body, and the refusal's status, code and what its message says."""

    headers: Callable[[Gateway], dict[str, str]]
    body: bytes
    status: int
    code: str
    says: str

    async def check(self, gw: Gateway, url: str) -> None:
        """Post the request to `url`: it is refused as said (a 401 asks for a bearer token)."""
        response = await gw.client.post(
            url, content=self.body, headers={**self.headers(gw), "Content-Type": "application/json"}
        )

        assert self.says in assert_error(response, self.status, self.code)
        if self.status == 401:
            assert response.headers["www-authenticate"] == "Bearer"


def refused(
    headers: Callable[[Gateway], dict[str, str]],
    body: bytes,
    status: int,
    code: str,
    says: str,
    *,
    id: str,
) -> Any:
    """A `Refusal` case for `pytest.mark.parametrize`, named `id`."""
    return pytest.param(Refusal(headers, body, status, code, says), id=id)


def refusals_before_the_run(
    *,
    kind: str,
    reply_to: str,
    another: str,
    valid: bytes,
    too_large: bytes,
    model: type[BaseModel],
    invalid_code: str,
) -> list[Any]:
    """The `Refusal` cases every reply route answers before the run is asked, checks cheapest
    first, for a route whose tokens are for a `kind` (its served gateway's subject) named
    `reply_to`; `another` is the subject of another one, `valid` a valid body, `too_large` one
    over the gateway's limit, `model` what a body is read as, and `invalid_code` the code of a
    JSON body that is not a valid one."""
    wrong = f"wrong_{kind}"
    says_another = f"token was issued for another {kind}"
    return [
        refused(lambda gw: {}, valid, 401, "missing_token", "Bearer", id="no-token"),
        refused(
            lambda gw: {"Authorization": "Basic dXNlcjpwYXNz"},
            valid,
            401,
            "missing_token",
            "Bearer",
            id="basic-auth",
        ),
        refused(
            lambda gw: bearer("not-a-token"), valid, 401, "invalid_token", "token", id="garbage"
        ),
        refused(forged, valid, 401, "invalid_token", "signature", id="forged"),
        refused(lambda gw: gw.auth(OP), valid, 401, wrong, says_another, id="op-token"),
        refused(
            # An operation that happens to be named like what the reply is to.
            lambda gw: gw.auth(reply_to),
            valid,
            401,
            wrong,
            says_another,
            id="op-token-same-name",
        ),
        refused(lambda gw: gw.auth(another), valid, 401, wrong, says_another, id=f"another-{kind}"),
        refused(
            lambda gw: bearer(gw.token(expires_in=-timedelta(seconds=1))),
            valid,
            410,
            "token_expired",
            "expired",
            id="expired",
        ),
        refused(Gateway.auth, too_large, 413, "body_too_large", "bytes", id="too-large"),
        refused(lambda gw: {}, too_large, 413, "body_too_large", "bytes", id="too-large-no-token"),
        refused(lambda gw: {}, b"not json", 401, "missing_token", "Bearer", id="auth-first"),
        refused(
            Gateway.auth,
            b"not json",
            422,
            "invalid_json",
            not_json(model, b"not json"),
            id="not-json",
        ),
        refused(Gateway.auth, b"", 422, "invalid_json", not_json(model, b""), id="empty"),
        refused(Gateway.auth, b"[]", 422, invalid_code, "body", id="not-an-object"),
    ]


# --- A stand-in for Temporal behind the real deliverer ------------------------------------------

Outcome = TypeVar("Outcome", bound=BaseModel)
# What the fake handle answers an Update with: an outcome, an error, or how to answer its input.
Scripted = Outcome | BaseException | Callable[[Any], Outcome]


@dataclass
class FakeHandle(Generic[Outcome]):
    """Records `execute_update` calls, each Update answered with an `outcome` model; answers
    from `script`. Described as a run of status `run` (None: no such run)."""

    outcome: type[Outcome]
    script: list[Scripted[Outcome]] = field(default_factory=list)
    updates: list[tuple[Any, Any, str]] = field(default_factory=list)
    run: WorkflowExecutionStatus | None = WorkflowExecutionStatus.RUNNING

    async def describe(self, *, rpc_timeout: timedelta | None = None) -> Any:
        if self.run is None:
            raise RPCError("no such run", RPCStatusCode.NOT_FOUND, b"")
        return SimpleNamespace(status=self.run)

    async def execute_update(
        self, update: Any, arg: Any, *, id: str, result_type: type[Any]
    ) -> Outcome:
        assert result_type is self.outcome
        self.updates.append((update, arg, id))
        answer = self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer if isinstance(answer, self.outcome) else cast(Any, answer)(arg)


@dataclass
class FakeClient(Generic[Outcome]):
    handle: FakeHandle[Outcome]
    workflow_ids: list[str] = field(default_factory=list)

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> FakeHandle[Outcome]:
        self.workflow_ids.append(workflow_id)
        return self.handle

    async def list_workflows(self, query: str, **_: Any) -> AsyncIterator[Any]:
        """No run has sub-agents here: a request a run does not know is no node's below it."""
        for nothing in ():
            yield nothing


def deliverer_for(
    outcome: type[Outcome], *script: Scripted[Outcome]
) -> tuple[TemporalDeliverer, FakeClient[Outcome]]:
    """The real deliverer over a fake client whose handle answers from `script`."""
    client = FakeClient(FakeHandle(outcome, list(script)))
    return TemporalDeliverer(cast(Client, client)), client


@asynccontextmanager
async def through_temporal(
    outcome: type[Outcome], subject: str, nonce: str
) -> AsyncIterator[tuple[httpx.AsyncClient, FakeHandle[Outcome]]]:
    """The real app over the real deliverer and a fake client whose handle answers Updates with
    `outcome` models (from its `script`): a client of the app that sends a link's token for
    `subject` issued with `nonce`, and the fake handle."""
    client = FakeClient(FakeHandle(outcome))
    tokens = ResumeTokens({"k1": GATEWAY_SECRET}, "k1")
    app = create_app(TemporalDeliverer(cast(Client, client)), tokens, max_body_bytes=MAX_BODY)
    expires_at = datetime.now(UTC) + timedelta(hours=1)
    token = tokens.mint(RUN, subject, expires_at, nonce=nonce).token
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://gateway", headers=bearer(token)
    ) as http:
        yield http, client.handle


def link_claims(subject: str, nonce: str) -> ResumeClaims:
    """The verified claims of a link's token for `subject`, issued with `nonce`."""
    return ResumeClaims(
        workflow_id=RUN,
        operation_id=subject,
        nonce=nonce,
        expires_at=datetime(2030, 1, 1, tzinfo=UTC),
        key_id="k1",
    )


def update_failed(error_type: str | None, message: str) -> WorkflowUpdateFailedError:
    """The run's validator rejected the Update with an `ApplicationError` of `error_type`."""
    return WorkflowUpdateFailedError(ApplicationError(message, type=error_type))


def rpc_error(status: RPCStatusCode) -> RPCError:
    """Temporal's refusal of a call with `status`; its message, Temporal's words, is not read."""
    return RPCError("words that are Temporal's", status, b"")


RUNNING, COMPLETED = WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED
# `(error, run, status, code)`: what Temporal, not the run's validators, refuses any Update with,
# the run as Temporal then describes it (its status, None: no such run), and the sender's answer.
TEMPORAL_REFUSALS = [
    (update_failed(None, "the run was cancelled"), RUNNING, 409, "refused"),
    # The run had ended when the Update came, or ended while it was in flight (found by the
    # chaos suite): Temporal says NOT_FOUND (or FAILED_PRECONDITION), as for a run that never
    # was; described, the run has ended.
    (rpc_error(RPCStatusCode.NOT_FOUND), COMPLETED, 409, "run_ended"),
    (rpc_error(RPCStatusCode.NOT_FOUND), WorkflowExecutionStatus.TERMINATED, 409, "run_ended"),
    (rpc_error(RPCStatusCode.FAILED_PRECONDITION), COMPLETED, 409, "run_ended"),
    (rpc_error(RPCStatusCode.NOT_FOUND), None, 404, "unknown_run"),
    # Open: the Update met the run as it continued as new, and may be sent again.
    (rpc_error(RPCStatusCode.NOT_FOUND), RUNNING, 503, "run_unavailable"),
    (rpc_error(RPCStatusCode.UNAVAILABLE), RUNNING, 503, "temporal_unavailable"),
    # No answer in time: Temporal may hold the Update for the run's worker. Not a refusal.
    (WorkflowUpdateRPCTimeoutOrCancelledError(), RUNNING, 504, "outcome_unknown"),
]
