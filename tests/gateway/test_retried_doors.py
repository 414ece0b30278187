"""Every door into a run is idempotent and truthful (issue 39), end to end: the real gateway over
HTTP with a `TemporalDeliverer` and a thread desk, the client under it, the dev server, the demo
systems, and a worker the tests stop and start again.

For each door (a thread's start and its next message, a decision by link and by the client, an
answer by link and by the client, a webhook's completion): the same request twice, and a request
whose answer is lost: to the gateway's timeout while no worker runs (504 `outcome_unknown`,
never a 503 "retry later", with the key that makes the retry safe), to the client's timeout
(`OutcomeUnknown`), or to a client that hangs up before reading. Each reaches one run, one
message, one decision, one answer, one completion, and the retry is told what became of the
first: the same message, "already applied", or the first one's outcome, never a refusal, and
never "token expired" for something applied while its token was valid.

While no worker runs, requests go through a gateway that waits `PATIENCE` for the run, not 20 s:
no worker ever answers them, so their outcome is unknown however long it waits. With a worker,
the gateway waits its usual 20 s. A retry past its token carries a token of the same claims
(run, subject, nonce) whose expiry has passed: what the gateway sees of the first token once it
has expired, without a test waiting for the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.demo.basic import demo_tools
from examples.demo.compliance import compliance_tools
from examples.demo.exports import ExportService, export_tool
from examples.demo.purges import PurgeService, purge_tool
from examples.demo.refunds import refund_tools
from examples.systems import DemoSystems, JobRecord, serving
from examples.systems import create_app as systems_app
from tests.helpers import eventually, first_question, make_worker, until_the_update_is_admitted
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, REFUND_TASK, REFUND_TOOLS
from waitstate.apps import load_apps
from waitstate.auth.operators import OperatorKeys
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import ClientError, OutcomeUnknown, WaitstateClient, thread_input
from waitstate.client._updates import answer_update_id, decision_update_id
from waitstate.gateway.app import create_app
from waitstate.gateway.delivery import TemporalDeliverer, update_id
from waitstate.gateway.threads import ThreadDesk
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.schemas.approvals import DecideInput, DecisionBody
from waitstate.schemas.operations import Completion
from waitstate.schemas.questions import AnswerBody, AnswerInput
from waitstate.settings import Settings
from waitstate.workflows.agent_run import AgentRunWorkflow

APPS = ["tests.workflows.threads_app:app", "tests.workflows.questions_app:app"]
CHAT_MODEL = "scripted:chat-echo"
KEYS = {"doors": "d" * 40}
OPERATOR = "operator-key-of-the-doors-0123456789abcdef"
# How long the gateway that serves the requests sent while no worker runs waits for a run.
PATIENCE = timedelta(seconds=2)
RESULT_WITHIN = 60.0  # far more than a run takes: only turns a hang into a failure
APPROVE = {"decision": "approve", "reviewer": "ana", "comment": "fine by me"}
CONFIRM = {"action": "accept", "content": {"confirm": True}, "responder": "ana"}
SUCCEEDED = {
    "status": "succeeded",
    "result": {"file": "exports/transactions-2025-Q3.csv", "rows": 7},
}
UPDATE_ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED


@dataclass
class Rig:
    """Two gateways over one dev server (the usual one, and one that waits `PATIENCE` for a run,
    for requests sent while no worker runs), the client under them, and the demo systems: an
    export service whose jobs never end (each test sends its export's webhook itself), and the
    rest (the refunds, the purges, the notices' outbox)."""

    client: Client
    waitstate: WaitstateClient
    http: httpx.AsyncClient
    gateway_url: str
    impatient_url: str
    systems: DemoSystems
    systems_url: str
    exports: DemoSystems
    exports_url: str
    tokens: ResumeTokens
    task_queue: str

    def worker(self) -> AbstractAsyncContextManager[Worker]:
        """The production worker wiring: the demo's tools, the export (its jobs never end), the
        refund, the purge, and the threads' and the purge's models."""
        settings = Settings(
            gateway_url=self.gateway_url,
            demo_systems_url=self.systems_url,
            token_keys=KEYS,
            token_signing_key="doors",
        )
        tools = [
            *demo_tools(),
            export_tool(ExportService(self.http, self.exports_url)),
            *compliance_tools(self.http, self.systems_url),
            *refund_tools(self.http, self.systems_url),
            purge_tool(PurgeService(self.http, self.systems_url)),
        ]
        return make_worker(
            self.client,
            self.task_queue,
            tools=tools,
            settings=settings,
            tokens=self.tokens,
            apps=load_apps(APPS),
        )

    async def start(
        self, task: str, tools: Sequence[str], **fields: Any
    ) -> WorkflowHandle[Any, RunResult]:
        return await self.client.start_workflow(
            AgentRunWorkflow.run,
            RunInput(task=task, tools=list(tools), **fields),
            id=f"run-{uuid.uuid4()}",
            task_queue=self.task_queue,
        )

    async def post(self, url: str, body: Any, authorization: str, **headers: str) -> httpx.Response:
        return await self.http.post(
            url, json=body, headers={"Authorization": authorization, **headers}
        )

    def impatient(self, url: str) -> str:
        """`url`, on the gateway that waits `PATIENCE` for a run."""
        return url.replace(self.gateway_url, self.impatient_url)

    # --- threads ---------------------------------------------------------------------------

    async def start_thread(self, body: dict[str, Any], gateway: str = "") -> httpx.Response:
        return await self.post(f"{gateway or self.gateway_url}/v1/threads", body, OPERATOR_AUTH)

    async def post_message(
        self, thread_id: str, token: str, body: dict[str, Any], gateway: str = ""
    ) -> httpx.Response:
        url = f"{gateway or self.gateway_url}/v1/threads/{thread_id}/messages"
        return await self.post(url, body, f"Bearer {token}")

    async def thread(self, thread_id: str) -> RunState:
        return await self.waitstate.query(thread_id)

    async def received(self, thread_id: str) -> int:
        """How many messages the thread has taken, all time."""
        state = await self.thread(thread_id)
        assert state.thread is not None
        return state.thread.received

    async def has_received(self, thread_id: str, count: int) -> bool:
        """Whether the thread has taken `count` messages (False while it cannot say: not
        started yet, or its first task not done)."""
        with contextlib.suppress(ClientError):
            return await self.received(thread_id) == count
        return False

    async def replied(self, thread_id: str, message_id: str) -> str:
        """The reply to the message, once it has one."""
        message = await self.waitstate.reply(thread_id, message_id, within=timedelta(seconds=30))
        assert message.status == "replied", message
        assert message.reply is not None
        return message.reply

    async def runs(self, workflow_id: str) -> int:
        """How many runs Temporal has under the id."""
        return len([r async for r in self.client.list_workflows(f'WorkflowId = "{workflow_id}"')])

    # --- what runs wait for -------------------------------------------------------------------

    async def notice(self, handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
        """The run's approval notice, once its link is confirmed by the run."""

        async def posted() -> dict[str, Any] | None:
            requests = (await _state(handle)).approvals.values()
            if not any(r.nonce_hash for r in requests):
                return None
            bodies = [e.body for e in self.systems.outbox if e.body["workflow_id"] == handle.id]
            return bodies[0] if bodies else None

        return await eventually(posted, f"the approval notice of {handle.id}")

    async def question_notice(self, handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
        """The run's question's notice (with its link), once the run asks it."""
        question = await first_question(handle, "the purge's question")

        async def posted() -> dict[str, Any] | None:
            bodies = [e.body for e in self.systems.outbox]
            return next((b for b in bodies if b.get("question_id") == question.question_id), None)

        return await eventually(posted, "the question's notice")

    async def job(self, handle: WorkflowHandle[Any, Any]) -> JobRecord:
        """The run's export job, once its operation waits for its webhook."""
        [job] = await self.jobs(handle, 1)
        return job

    async def jobs(self, handle: WorkflowHandle[Any, Any], count: int) -> list[JobRecord]:
        """The run's `count` export jobs, in the order they were started, once their
        operations wait for their webhooks."""

        async def started() -> list[JobRecord]:
            state = await _state(handle)
            running = [op for op in state.operations.values() if op.status == "running"]
            mine = [j for j in self.exports.jobs.values() if j.key.startswith(f"{handle.id}/")]
            ready = len(mine) == len(running) == count and all(j.callback_token for j in mine)
            return sorted(mine, key=lambda j: j.key) if ready else []

        return await eventually(started, f"{count} export jobs of {handle.id}")

    async def purges(self) -> dict[str, int]:
        stats = (await self.http.get(f"{self.systems_url}/_test/stats")).json()
        return dict(stats["purges"])


OPERATOR_AUTH = f"Bearer {OPERATOR}"


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Rig]:
    tokens = ResumeTokens(KEYS, "doors")
    waitstate = WaitstateClient(dev_env.client, task_queue=task_queue)

    def gateway(patience: timedelta | None) -> Any:
        desk = ThreadDesk(waitstate, OperatorKeys({"ops": OPERATOR}), default_model=CHAT_MODEL)
        deliverer = TemporalDeliverer(dev_env.client)
        if patience is not None:
            desk.answer_within = patience
            deliverer = TemporalDeliverer(dev_env.client, timeout=patience)
        return create_app(deliverer, tokens, threads=desk)

    systems, exports = systems_app(), systems_app()
    async with (
        httpx.AsyncClient(timeout=60) as http,
        serving(systems) as systems_url,
        serving(exports) as exports_url,
        serving(gateway(None)) as gateway_url,
        serving(gateway(PATIENCE)) as impatient_url,
    ):
        faults = await http.post(f"{exports_url}/_test/faults", json={"never_complete": True})
        faults.raise_for_status()
        yield Rig(
            dev_env.client,
            waitstate,
            http,
            gateway_url,
            impatient_url,
            systems.state.systems,
            systems_url,
            exports.state.systems,
            exports_url,
            tokens,
            task_queue,
        )


async def _state(handle: WorkflowHandle[Any, Any]) -> RunState:
    state: RunState = await handle.query(AgentRunWorkflow.status)
    return state


async def _result(handle: WorkflowHandle[Any, RunResult]) -> RunResult:
    return await asyncio.wait_for(handle.result(), RESULT_WITHIN)


async def _accepted_updates(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The names of the Updates the run (its whole chain) accepted, in order."""
    return [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        async for e in handle.fetch_history_events()
        if e.event_type == UPDATE_ACCEPTED
    ]


def _unknown(response: httpx.Response) -> dict[str, str]:
    """The fields of a 504 `outcome_unknown` answer (in the gateway's error shape)."""
    assert response.status_code == 504, response.text
    error: dict[str, str] = response.json()["error"]
    assert error["code"] == "outcome_unknown", error
    assert error["message"]
    return error


def _code(response: httpx.Response) -> tuple[int, str | None]:
    if response.status_code < 300:
        return response.status_code, None
    return response.status_code, response.json()["error"]["code"]


def _expired(tokens: ResumeTokens, authorization: str) -> str:
    """The `Authorization` of a token with the same claims as `authorization`'s (the same run,
    subject and nonce: as genuine) that has expired: what a request retried after its token's
    expiry carries."""
    claims = tokens.verify(authorization.removeprefix("Bearer "))
    past = datetime.now(UTC) - timedelta(seconds=1)
    expired = tokens.mint(claims.workflow_id, claims.operation_id, past, nonce=claims.nonce)
    return f"Bearer {expired.token}"


async def _hang_up_once(
    url: str, body: Any, headers: dict[str, str], reached: Callable[[], Awaitable[bool]]
) -> None:
    """POST `body` to `url` and hang up without reading the answer, once `reached` says the
    request reached the run: a client whose answer is lost."""
    target = httpx.URL(url)
    assert target.port is not None
    payload = json.dumps(body).encode()
    head = [
        f"POST {target.raw_path.decode()} HTTP/1.1",
        f"Host: {target.host}:{target.port}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    _, writer = await asyncio.open_connection(target.host, target.port)
    try:
        writer.write("\r\n".join(head).encode() + b"\r\n\r\n" + payload)
        await writer.drain()
        await eventually(reached, f"the request to {target.path} to reach the run")
    finally:
        writer.close()
        await writer.wait_closed()


# --- a thread's start ----------------------------------------------------------------------------


async def test_a_start_whose_answer_is_lost_while_no_worker_runs_starts_one_thread(
    rig: Rig,
) -> None:
    # No thread id, no key: the gateway picks both, and names them when it cannot tell.
    lost = await rig.start_thread({"text": "hello"}, gateway=rig.impatient_url)
    unknown = _unknown(lost)
    thread_id, key = unknown["thread_id"], unknown["key"]
    retry = {"text": "hello", "thread_id": thread_id, "key": key}
    # Still no worker: the thread cannot say whether this is its start's retry; nothing is sent.
    too_soon = await rig.start_thread(retry, gateway=rig.impatient_url)
    async with rig.worker():
        await eventually(lambda: rig.has_received(thread_id, 1), "the start's message taken")
        retried = await rig.start_thread(retry)
        reply = await rig.replied(thread_id, "m1")
        state = await rig.thread(thread_id)

    assert (too_soon.status_code, too_soon.json()["error"]["code"]) == (503, "thread_unavailable")
    assert retried.status_code == 201, retried.text
    assert retried.json()["thread_id"] == thread_id
    assert retried.json()["message"]["message_id"] == "m1"
    assert retried.json()["message"]["duplicate"] is True
    assert reply == "re: hello (1 seen)"
    assert state.thread is not None and state.thread.received == 1
    assert [m.key for m in state.thread.messages] == [key]
    assert await rig.runs(thread_id) == 1


async def test_a_start_sent_twice_or_whose_client_hung_up_starts_one_thread(rig: Rig) -> None:
    thread_id = f"thread-doors-{uuid.uuid4().hex[:8]}"
    body = {"text": "hello", "thread_id": thread_id, "key": "start-1"}
    other = f"thread-doors-{uuid.uuid4().hex[:8]}"
    hung_up = {"text": "hello", "thread_id": other, "key": "start-2"}
    async with rig.worker():
        twice = await asyncio.gather(rig.start_thread(body), rig.start_thread(body))

        await _hang_up_once(
            f"{rig.gateway_url}/v1/threads",
            hung_up,
            {"Authorization": OPERATOR_AUTH},
            lambda: rig.has_received(other, 1),
        )
        retried = await rig.start_thread(hung_up)
        received = (await rig.received(thread_id), await rig.received(other))

    assert sorted(_code(r) for r in twice) == [(201, None)] * 2
    assert {r.json()["message"]["message_id"] for r in twice} == {"m1"}
    assert sorted(r.json()["message"]["duplicate"] for r in twice) == [False, True]
    assert _code(retried) == (201, None)
    assert retried.json()["message"] == {
        "message_id": "m1",
        "status": retried.json()["message"]["status"],
        "ahead": 0,
        "duplicate": True,
    }
    assert received == (1, 1)
    assert (await rig.runs(thread_id), await rig.runs(other)) == (1, 1)


# --- a thread's next message ---------------------------------------------------------------------


async def test_a_message_whose_answer_is_lost_while_no_worker_runs_is_taken_once(
    rig: Rig,
) -> None:
    """Finding 2: the post's Update was admitted by Temporal, held for a worker and taken once
    one came back; the gateway had answered 503 `thread_unavailable`, "retry later", and the
    retry was a second message."""
    async with rig.worker():
        started = await rig.start_thread({"text": "hello"})
        thread_id, token = started.json()["thread_id"], started.json()["thread_token"]
        await rig.replied(thread_id, "m1")
    lost = await rig.post_message(thread_id, token, {"text": "still there?"}, rig.impatient_url)
    key = _unknown(lost)["key"]
    async with rig.worker():
        retried = await rig.post_message(thread_id, token, {"text": "still there?", "key": key})
        reply = await rig.replied(thread_id, retried.json()["message_id"])
        state = await rig.thread(thread_id)

    assert set(_unknown(lost)) == {"code", "message", "key"}
    assert _code(retried) == (202, None)
    assert retried.json()["message_id"] == "m2"
    assert reply == "re: still there? (2 seen)"
    assert state.thread is not None and state.thread.received == 2
    assert [m.key for m in state.thread.messages][1:] == [key]


async def test_a_message_sent_twice_or_whose_client_hung_up_is_taken_once(rig: Rig) -> None:
    async with rig.worker():
        started = await rig.start_thread({"text": "hello"})
        thread_id, token = started.json()["thread_id"], started.json()["thread_token"]
        twice = await asyncio.gather(
            *(rig.post_message(thread_id, token, {"text": "once", "key": "k-1"}) for _ in "ab")
        )

        url = f"{rig.gateway_url}/v1/threads/{thread_id}/messages"
        hung_up = {"text": "and once more", "key": "k-2"}
        await _hang_up_once(
            url,
            hung_up,
            {"Authorization": f"Bearer {token}"},
            lambda: rig.has_received(thread_id, 3),
        )
        retried = await rig.post_message(thread_id, token, hung_up)
        await rig.replied(thread_id, "m3")
        state = await rig.thread(thread_id)

    assert [_code(r) for r in twice] == [(202, None)] * 2
    assert {r.json()["message_id"] for r in twice} == {"m2"}
    assert sorted(r.json()["duplicate"] for r in twice) == [False, True]
    assert (_code(retried), retried.json()["message_id"]) == ((202, None), "m3")
    assert retried.json()["duplicate"] is True
    assert state.thread is not None and state.thread.received == 3
    assert [m.key for m in state.thread.messages][1:] == ["k-1", "k-2"]


async def test_a_message_the_client_sends_is_keyed_and_its_lost_answer_names_the_key(
    rig: Rig,
) -> None:
    """`WaitstateClient.send_message`: a send with no key is given one; one whose answer the
    client gave up on (`OutcomeUnknown`) is the same message when sent again with its key."""
    thread_id = f"thread-client-{uuid.uuid4().hex[:8]}"
    async with rig.worker():
        start = thread_input(model=CHAT_MODEL)
        first = await rig.waitstate.send_message(thread_id, "hello", start=start)
        await rig.replied(thread_id, "m1")
    with pytest.raises(OutcomeUnknown) as lost:
        await rig.waitstate.send_message(thread_id, "still there?", answer_within=PATIENCE)
    async with rig.worker():
        again = await rig.waitstate.send_message(thread_id, "still there?", key=lost.value.key)
        await rig.replied(thread_id, "m2")
        received = await rig.received(thread_id)

    assert first.key is not None and first.accepted.message_id == "m1"
    assert lost.value.key != first.key and lost.value.key in str(lost.value)
    assert (again.key, again.accepted.message_id) == (lost.value.key, "m2")
    assert received == 2


# --- a decision ------------------------------------------------------------------------------------


async def test_a_decision_whose_answer_is_lost_while_no_worker_runs_is_applied_once(
    rig: Rig,
) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        link = (await rig.notice(handle))["decision"]
    lost = await rig.post(rig.impatient(link["url"]), APPROVE, link["authorization"])
    async with rig.worker():
        retried = await rig.post(link["url"], APPROVE, link["authorization"])
        result = await _result(handle)

    assert set(_unknown(lost)) == {"code", "message"}  # the decision itself is the key
    # When Temporal had taken the first request's Update in before the gateway gave up, it was
    # applied once the worker was back and the retry shares it; when it had not (a loaded
    # server), the retry is the one applied. Either way, one decision.
    if _code(retried) != (200, None):
        assert _code(retried) == (409, "duplicate_decision")
        assert "already applied" in retried.json()["error"]["message"]
    assert result.status == "completed"
    assert len(rig.systems.refunds) == 1
    assert await _accepted_updates(handle) == ["decide"]


async def test_a_decision_sent_twice_hung_up_on_or_retried_past_its_token_is_applied_once(
    rig: Rig,
) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        notice = await rig.notice(handle)
        link = notice["decision"]

        async def decided() -> bool:
            return (await _state(handle)).approvals[notice["request_id"]].status == "approved"

        await _hang_up_once(link["url"], APPROVE, {"Authorization": link["authorization"]}, decided)
        twice = await asyncio.gather(
            *(rig.post(link["url"], APPROVE, link["authorization"]) for _ in "ab")
        )
        # The link's token has expired since (the same claims, an expiry in the past).
        late = await rig.post(link["url"], APPROVE, _expired(rig.tokens, link["authorization"]))
        other = await rig.post(
            link["url"],
            {**APPROVE, "comment": "another"},
            _expired(rig.tokens, link["authorization"]),
        )
        result = await _result(handle)

    assert [_code(r) for r in twice] == [(409, "duplicate_decision")] * 2
    # Finding 9's kind: the same decision, applied while the token was valid, is told so.
    assert _code(late) == (409, "duplicate_decision")
    # Another decision through an expired link was never sent: expired it is.
    assert _code(other) == (410, "token_expired")
    assert result.status == "completed"
    assert len(rig.systems.refunds) == 1
    assert await _accepted_updates(handle) == ["decide"]


async def test_a_decision_the_client_sends_again_gets_the_first_ones_outcome(rig: Rig) -> None:
    """`WaitstateClient.decide`: the decision is its own key, so the same decision sent twice,
    or again after the client gave up on its answer, or after a caller hung up, is one Update."""
    async with rig.worker():
        handles = [await rig.start(REFUND_TASK, REFUND_TOOLS) for _ in range(3)]
        twice, lost, hung_up = handles
        requests = {h.id: (await rig.notice(h))["request_id"] for h in handles}

        def decision(handle: WorkflowHandle[Any, Any]) -> DecideInput:
            return DecideInput(request_id=requests[handle.id], decision="approve", reviewer="ana")

        outcomes = [await rig.waitstate.decide(twice.id, decision(twice)) for _ in "ab"]
        # A caller that hangs up once the Update reached the run.
        update = decision_update_id(
            requests[hung_up.id], DecisionBody(decision="approve", reviewer="ana")
        )
        deciding = asyncio.create_task(rig.waitstate.decide(hung_up.id, decision(hung_up)))
        await until_the_update_is_admitted(rig.client, hung_up, f"client/{update}")
        deciding.cancel()
        await asyncio.gather(deciding, return_exceptions=True)  # its answer, never read
        again = await rig.waitstate.decide(hung_up.id, decision(hung_up))
    with pytest.raises(OutcomeUnknown) as unknown:
        await rig.waitstate.decide(lost.id, decision(lost), answer_within=PATIENCE)
    async with rig.worker():
        retried = await rig.waitstate.decide(lost.id, decision(lost), update_id=unknown.value.key)
        results = [await _result(h) for h in handles]

    assert [(o.accepted, o.status) for o in outcomes] == [(True, "approved")] * 2
    assert (again.accepted, again.status) == (True, "approved")
    assert unknown.value.key.startswith("client/decide/")
    assert (retried.accepted, retried.status) == (True, "approved")
    # One claim's refund for all three (its key is the claim's): each run applied one decision.
    assert [r.status for r in results] == ["completed"] * 3
    for handle in handles:
        assert await _accepted_updates(handle) == ["decide"], handle.id


# --- an answer to a question -----------------------------------------------------------------------


async def test_an_answer_whose_answer_is_lost_or_retried_past_its_token_is_applied_once(
    rig: Rig,
) -> None:
    async with rig.worker():
        handle = await rig.start(
            "purge the staging events", ["purge_dataset"], model="scripted:purge"
        )
        link = (await rig.question_notice(handle))["answer"]
    lost = await rig.post(rig.impatient(link["url"]), CONFIRM, link["authorization"])
    async with rig.worker():
        retried = await rig.post(link["url"], CONFIRM, link["authorization"])
        late = await rig.post(link["url"], CONFIRM, _expired(rig.tokens, link["authorization"]))
        result = await _result(handle)
    purges = await rig.purges()

    assert set(_unknown(lost)) == {"code", "message"}
    assert _code(retried) == (200, None) and retried.json()["delivered"] is True
    assert (late.status_code, late.json()) == (200, retried.json())
    assert result.status == "completed"
    assert (purges["questions_asked"], purges["answers_applied"]) == (1, 1)
    assert (await _accepted_updates(handle)).count("answer") == 1


async def test_an_answer_sent_twice_hung_up_on_or_retried_past_its_token_is_applied_once(
    rig: Rig,
) -> None:
    async with rig.worker():
        handle = await rig.start(
            "purge the staging events", ["purge_dataset"], model="scripted:purge"
        )
        notice = await rig.question_notice(handle)
        link, question_id = notice["answer"], notice["question_id"]

        async def answered() -> bool:
            return (await _state(handle)).questions[question_id].status == "answered"

        await _hang_up_once(
            link["url"], CONFIRM, {"Authorization": link["authorization"]}, answered
        )
        twice = await asyncio.gather(
            *(rig.post(link["url"], CONFIRM, link["authorization"]) for _ in "ab")
        )
        late = await rig.post(link["url"], CONFIRM, _expired(rig.tokens, link["authorization"]))
        result = await _result(handle)
    purges = await rig.purges()

    assert [_code(r) for r in twice] == [(200, None)] * 2
    assert twice[0].json() == twice[1].json() and twice[0].json()["delivered"] is True
    # Its token has expired since: the answer applied while it was valid is told so.
    assert (late.status_code, late.json()) == (200, twice[0].json())
    assert result.status == "completed"
    assert (purges["questions_asked"], purges["answers_applied"]) == (1, 1)
    assert (await _accepted_updates(handle)).count("answer") == 1


async def test_an_answer_the_client_sends_again_gets_the_first_ones_outcome(rig: Rig) -> None:
    async with rig.worker():
        handle = await rig.start(
            "purge the staging events", ["purge_dataset"], model="scripted:purge"
        )
        question = await first_question(handle, "the purge's question")
    answer = AnswerInput(
        question_id=question.question_id, action="accept", content={"confirm": True}
    )
    with pytest.raises(OutcomeUnknown) as unknown:
        await rig.waitstate.answer(handle.id, answer, answer_within=PATIENCE)
    async with rig.worker():
        retried = await rig.waitstate.answer(handle.id, answer)
        again = await rig.waitstate.answer(handle.id, answer)
        result = await _result(handle)
    purges = await rig.purges()

    body = AnswerBody(action="accept", content={"confirm": True})
    assert unknown.value.key == f"client/{answer_update_id(question.question_id, body)}"
    assert (retried.accepted, retried.delivered) == (True, True)
    assert again == retried
    assert result.status == "completed"
    assert (purges["questions_asked"], purges["answers_applied"]) == (1, 1)
    assert (await _accepted_updates(handle)).count("answer") == 1


# --- a webhook's completion ------------------------------------------------------------------------


async def test_a_completion_whose_answer_is_lost_then_retried_past_its_token_is_applied_once(
    rig: Rig,
) -> None:
    """Finding 9: the first delivery got no answer in time (no worker) but was applied once a
    worker came back; its retry, sent after the token had expired, got 410 `token_expired`."""
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS)
        job = await rig.job(handle)
    assert job.callback_url is not None and job.callback_token is not None
    authorization = f"Bearer {job.callback_token}"
    lost = await rig.post(rig.impatient(job.callback_url), SUCCEEDED, authorization)
    async with rig.worker():
        retried = await rig.post(job.callback_url, SUCCEEDED, authorization)
        late = await rig.post(job.callback_url, SUCCEEDED, _expired(rig.tokens, authorization))
        other = await rig.post(
            job.callback_url,
            {"status": "running", "progress": "50%"},
            _expired(rig.tokens, authorization),
        )
        result = await _result(handle)
        state = await _state(handle)

    assert "key" in _unknown(lost)
    assert _code(retried) == (409, "duplicate_completion")
    assert _code(late) == (409, "duplicate_completion")
    assert "already applied" in late.json()["error"]["message"]
    assert _code(other) == (410, "token_expired")
    assert result.status == "completed"
    [operation] = state.operations.values()
    assert (operation.status, operation.result) == ("succeeded", SUCCEEDED["result"])
    assert await _accepted_updates(handle) == ["complete_operation"]


async def test_a_completion_retried_past_its_token_once_its_run_continued_as_new_is_told_so(
    rig: Rig,
) -> None:
    """The run that applied a completion has continued as new since: the Update is looked for
    in the runs of its chain."""
    async with rig.worker():
        handle = await rig.start(
            EXPORT_TASK,
            ["start_export"],
            model="scripted:two-exports",
            continue_as_new_after_events=10,
        )
        first, second = await rig.jobs(handle, 2)
        assert first.callback_url and first.callback_token
        assert second.callback_url and second.callback_token
        authorization = f"Bearer {first.callback_token}"
        applied = await rig.post(first.callback_url, SUCCEEDED, authorization)

        async def continued() -> bool:
            return (await _state(handle)).continued_as_new >= 1

        await eventually(continued, "the run to continue as new while it waits")
        late = await rig.post(first.callback_url, SUCCEEDED, _expired(rig.tokens, authorization))
        valid = await rig.post(first.callback_url, SUCCEEDED, authorization)
        done = await rig.post(second.callback_url, SUCCEEDED, f"Bearer {second.callback_token}")
        result = await _result(handle)

    assert _code(applied) == (200, None)
    assert _code(late) == (409, "duplicate_completion")
    # With its token still valid, it goes to the next run: refused as a completion of an
    # operation that has ended, or (when Temporal still knows the Update's id from the run it
    # continued from) answered as the copy it is. Either way a 409 that applies nothing.
    assert _code(valid) in {(409, "operation_resolved"), (409, "duplicate_completion")}
    assert _code(done) == (200, None)
    assert result.status == "completed"


async def test_a_progress_report_whose_answer_is_lost_is_applied_once_with_its_key(
    rig: Rig,
) -> None:
    """A progress report with no id of its sender's is given one when its outcome is unknown:
    sent again with it (`Idempotency-Key`), it is that report, not a second one."""
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS)
        job = await rig.job(handle)
    assert job.callback_url is not None and job.callback_token is not None
    authorization = f"Bearer {job.callback_token}"
    report = {"status": "running", "progress": "50%"}
    lost = await rig.post(rig.impatient(job.callback_url), report, authorization)
    key = _unknown(lost)["key"]
    async with rig.worker():
        retried = await rig.post(
            job.callback_url, report, authorization, **{"Idempotency-Key": key}
        )
        late = await rig.post(
            job.callback_url,
            report,
            _expired(rig.tokens, authorization),
            **{"Idempotency-Key": key},
        )
        done = await rig.post(job.callback_url, SUCCEEDED, authorization)
        result = await _result(handle)
        [operation_id] = (await _state(handle)).operations

    completion = Completion.model_validate(report)
    assert key in lost.json()["error"]["message"]
    assert update_id(operation_id, completion, "any", key) == update_id(
        operation_id, completion, key
    )
    assert _code(retried) == (409, "duplicate_completion")
    assert _code(late) == (409, "duplicate_completion")
    assert _code(done) == (200, None)
    assert result.status == "completed"
    assert await _accepted_updates(handle) == ["complete_operation"] * 2


async def test_a_completion_sent_twice_hung_up_on_or_retried_past_its_token_is_applied_once(
    rig: Rig,
) -> None:
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS)
        job = await rig.job(handle)
        assert job.callback_url is not None and job.callback_token is not None
        authorization = f"Bearer {job.callback_token}"

        async def applied() -> bool:
            operations = (await _state(handle)).operations.values()
            return all(op.status == "succeeded" for op in operations)

        await _hang_up_once(job.callback_url, SUCCEEDED, {"Authorization": authorization}, applied)
        twice = await asyncio.gather(
            *(rig.post(job.callback_url, SUCCEEDED, authorization) for _ in "ab")
        )
        late = await rig.post(job.callback_url, SUCCEEDED, _expired(rig.tokens, authorization))
        # An expired token is refused as such whatever else is wrong with the request.
        malformed = await rig.post(
            job.callback_url, {"status": "nonsense"}, _expired(rig.tokens, authorization)
        )
        past = datetime.now(UTC) - timedelta(seconds=1)
        elsewhere = rig.tokens.mint(handle.id, "op_other", past).token
        misdirected = await rig.post(job.callback_url, SUCCEEDED, f"Bearer {elsewhere}")
        result = await _result(handle)

    assert [_code(r) for r in twice] == [(409, "duplicate_completion")] * 2
    # Finding 9: its token has expired since; what was applied while it was valid is told so.
    assert _code(late) == (409, "duplicate_completion")
    assert _code(malformed) == (410, "token_expired")
    assert _code(misdirected) == (410, "token_expired")
    assert result.status == "completed"
    assert await _accepted_updates(handle) == ["complete_operation"]
