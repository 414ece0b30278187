"""The purge service over real HTTP: a job that asks to be confirmed by callback, takes the
first answer to its question and keeps the others out; and `PurgeService`, the long tool over
it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from examples.demo.purges import PURGE_CONFIRMATION, PurgeArgs, PurgeService, purge_tool
from examples.demo.services import ServiceError
from examples.systems import serving
from tests.examples.systems_helpers import (
    Hook,
    Receiver,
    assert_long_tool,
    context,
    hook_number,
    idle,
    set_faults,
    stats,
    systems_app_fixture,
)
from tests.helpers import eventually
from waitstate import Completion, InputPolicy, JobAnswer, ToolError

# How long a purge counts rows before it asks, and purges once confirmed.
STEP_SECONDS = 0.05
CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}


systems_app = systems_app_fixture(export_seconds=STEP_SECONDS)


async def start_purge(
    client: httpx.AsyncClient, receiver: Receiver, name: str, dataset: str = "staging_events"
) -> str:
    response = await client.post(
        "/purges",
        json={
            "dataset": dataset,
            "callback_url": f"{receiver.url}/hooks/{name}",
            "callback_token": f"token-{name}",
        },
        headers={"Idempotency-Key": f"key-{name}"},
    )
    assert response.status_code == 201, response.text
    job_id: str = response.json()["job_id"]
    return job_id


async def answer(
    client: httpx.AsyncClient,
    job_id: str,
    action: str = "accept",
    content: dict[str, Any] | None = None,
    responder: str = "dana",
    key: str = "confirm",
) -> httpx.Response:
    body = {"key": key, "action": action, "content": content, "responder": responder}
    return await client.post(f"/purges/{job_id}/answers", json=body)


# --- The system ----------------------------------------------------------------------------


async def test_a_purge_asks_its_callback_for_confirmation(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    job_id = await start_purge(client, receiver, "ask")

    question = await hook_number(receiver, "ask", 1)
    view = (await client.get(f"/purges/{job_id}")).json()

    assert job_id.startswith("prg_")
    assert question.authorization == "Bearer token-ask"
    [asked] = question.body["questions"]
    assert question.body == {
        "status": "input_required",
        "progress": "waiting for confirmation",
        "questions": [
            {
                "key": "confirm",
                "message": asked["message"],
                "requested_schema": CONFIRM_SCHEMA,
            }
        ],
    }
    assert asked["message"].startswith("Purge dataset staging_events (")
    assert asked["message"].endswith(" rows)? This cannot be undone.")
    # What the webhook carries is a valid Completion, as the gateway will read it.
    assert Completion.model_validate(question.body).questions is not None
    assert view == {"job_id": job_id, **question.body}
    seen = await stats(client)
    assert seen["jobs"][job_id]["questions"] == ["confirm"]
    assert seen["purges"] == {
        "started": 1,
        "questions_asked": 1,
        "answers_received": 0,
        "answers_applied": 0,
        "cancels": 0,
    }


async def test_a_confirmed_purge_succeeds_with_who_confirmed_it(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    job_id = await start_purge(client, receiver, "yes")
    question = await hook_number(receiver, "yes", 1)

    answered = await answer(client, job_id, content={"confirm": True}, responder="dana")
    final = await hook_number(receiver, "yes", 2)

    assert answered.status_code == 200
    assert answered.json() == {"applied": True}
    rows = int(question.body["questions"][0]["message"].split("(")[1].split()[0])
    result = {"dataset": "staging_events", "purged_rows": rows, "confirmed_by": "dana"}
    assert final.body == {"status": "succeeded", "result": result}
    assert final.authorization == "Bearer token-yes"
    view = (await client.get(f"/purges/{job_id}")).json()
    assert view == {"job_id": job_id, "status": "succeeded", "result": result, "progress": "100%"}


@pytest.mark.parametrize(
    ("action", "content"),
    [("decline", None), ("accept", {"confirm": False})],
    ids=["decline", "accept-no"],
)
async def test_a_purge_not_confirmed_fails_not_confirmed(
    client: httpx.AsyncClient,
    receiver: Receiver,
    systems_app: tuple[FastAPI, str],
    action: str,
    content: dict[str, Any] | None,
) -> None:
    job_id = await start_purge(client, receiver, "no")
    await hook_number(receiver, "no", 1)

    answered = await answer(client, job_id, action, content, responder="omar")
    final = await hook_number(receiver, "no", 2)
    await idle(systems_app[0])

    error = {
        "code": "not_confirmed",
        "message": "purge of staging_events not confirmed (declined by omar)",
        "retryable": False,
    }
    assert answered.json() == {"applied": True}
    assert final.body == {"status": "failed", "error": error}
    assert (await client.get(f"/purges/{job_id}")).json() == {
        "job_id": job_id,
        "status": "failed",
        "error": error,
    }
    assert len(receiver.named("no")) == 2


async def test_only_the_first_answer_to_a_question_is_applied(
    client: httpx.AsyncClient, receiver: Receiver, systems_app: tuple[FastAPI, str]
) -> None:
    job_id = await start_purge(client, receiver, "twice")
    await hook_number(receiver, "twice", 1)

    yes, no = await asyncio.gather(
        answer(client, job_id, content={"confirm": True}, responder="dana"),
        answer(client, job_id, "decline", responder="omar"),
    )
    final = await hook_number(receiver, "twice", 2)
    after_the_end = await answer(client, job_id, content={"confirm": True}, responder="lena")
    await idle(systems_app[0])

    # Either may come first; whichever does decides, and the other is kept out.
    outcomes = sorted([yes.json(), no.json()], key=lambda body: not body["applied"])
    assert outcomes == [{"applied": True}, {"applied": False, "reason": "already answered"}]
    if yes.json()["applied"]:
        assert final.body["result"]["confirmed_by"] == "dana"
    else:
        assert final.body["error"]["message"].endswith("(declined by omar)")
    # A repeat after the job has ended is told the first answer counted (not a 409).
    assert after_the_end.status_code == 200
    assert after_the_end.json() == {"applied": False, "reason": "already answered"}
    assert len(receiver.named("twice")) == 2
    seen = await stats(client)
    assert [(a["applied"], a["reason"]) for a in seen["jobs"][job_id]["answers"]] == [
        (True, None),
        (False, "already answered"),
        (False, "already answered"),
    ]
    assert seen["purges"]["answers_received"] == 3
    assert seen["purges"]["answers_applied"] == 1


async def test_an_answer_sent_before_the_question_is_acknowledged_is_applied(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    answers: list[httpx.Response] = []

    async def answer_at_once(hook: Hook) -> None:
        if hook.body["status"] == "input_required":
            [job_id] = (await stats(client))["jobs"]
            answers.append(await answer(client, job_id, content={"confirm": True}, responder="mei"))

    receiver.on_hook = answer_at_once
    await start_purge(client, receiver, "fast")

    final = await hook_number(receiver, "fast", 2)

    assert [response.json() for response in answers] == [{"applied": True}]
    assert final.body["status"] == "succeeded"
    assert final.body["result"]["confirmed_by"] == "mei"


async def test_a_cancelled_purge_takes_no_answer(
    client: httpx.AsyncClient, receiver: Receiver, systems_app: tuple[FastAPI, str]
) -> None:
    job_id = await start_purge(client, receiver, "cancel")
    await hook_number(receiver, "cancel", 1)

    cancelled = await client.post(f"/purges/{job_id}/cancel")
    refused = await answer(client, job_id, content={"confirm": True})
    await idle(systems_app[0])

    assert cancelled.json() == {"job_id": job_id, "status": "cancelled"}
    assert refused.status_code == 409
    assert refused.json() == {
        "detail": f"purge job {job_id} has ended (cancelled); it takes no answers"
    }
    assert len(receiver.named("cancel")) == 1
    seen = await stats(client)
    assert seen["purges"]["cancels"] == 1
    assert seen["purges"]["answers_applied"] == 0
    assert seen["jobs"][job_id]["answers"][0]["reason"] == refused.json()["detail"]


async def test_answers_the_job_cannot_take_are_refused(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    job_id = await start_purge(client, receiver, "refuse")
    await hook_number(receiver, "refuse", 1)

    unknown_key = await answer(client, job_id, key="really", content={"confirm": True})
    no_content = await answer(client, job_id, content=None)
    not_a_boolean = await answer(client, job_id, content={"confirm": "yes"})
    unknown_job = await answer(client, "prg_nope", content={"confirm": True})
    bad_action = await answer(client, job_id, "maybe")

    assert unknown_key.status_code == 422
    assert unknown_key.json() == {"detail": f"purge job {job_id} has asked no question 'really'"}
    for response in (no_content, not_a_boolean):
        assert response.status_code == 422
        assert response.json() == {"detail": 'an accept carries content {"confirm": true or false}'}
    assert unknown_job.status_code == 404
    assert unknown_job.json() == {"detail": "the purge service has no job 'prg_nope'"}
    assert bad_action.status_code == 422
    # None was applied: the question is still open and its first real answer counts.
    assert (await client.get(f"/purges/{job_id}")).json()["status"] == "input_required"
    assert (await answer(client, job_id, "decline")).json() == {"applied": True}
    # Received: the three refused by the job and the decline (not those without a job, or a
    # body to read).
    purges = (await stats(client))["purges"]
    assert (purges["answers_received"], purges["answers_applied"]) == (4, 1)


async def test_a_purge_asks_in_the_schema_a_fault_names_for_its_dataset(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    # A hostile job, for the chaos suite: its question's pattern backtracks on a crafted answer.
    crafted = {
        "type": "object",
        "properties": {
            "confirm": {"type": "boolean"},
            "name": {"type": "string", "pattern": "^(a+)+$"},
        },
        "required": ["confirm"],
    }
    await set_faults(client, purge_schemas={"hostile": crafted})
    hostile = await start_purge(client, receiver, "hostile", dataset="hostile")
    await start_purge(client, receiver, "usual")

    asked = await hook_number(receiver, "hostile", 1)
    usual = await hook_number(receiver, "usual", 1)
    answered = await answer(client, hostile, content={"confirm": True, "name": "aaa"})

    assert asked.body["questions"][0]["requested_schema"] == crafted
    assert usual.body["questions"][0]["requested_schema"] == CONFIRM_SCHEMA
    assert answered.json() == {"applied": True}


async def test_a_held_purge_asks_only_once_told_to(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    # For the chaos suite: the question comes when the test wants it (e.g. while the run's
    # checkpoint call is in flight), not after a clock's duration.
    await set_faults(client, held_purges=["held"])
    held = await start_purge(client, receiver, "held", dataset="held")
    await start_purge(client, receiver, "usual")
    # A purge started after it has counted its rows and asked: the held one would have too.
    await hook_number(receiver, "usual", 1)
    counted = (await client.get(f"/purges/{held}")).json()

    told = await client.post("/_test/purges/held/ask")
    asked = await hook_number(receiver, "held", 1)

    assert (counted["status"], counted["progress"]) == ("running", "counting rows")
    assert told.status_code == 204
    assert asked.body["status"] == "input_required"
    assert (await client.get(f"/purges/{held}")).json()["status"] == "input_required"


async def test_a_purge_whose_question_is_refused_as_malformed_fails_saying_why(
    client: httpx.AsyncClient, systems_app: tuple[FastAPI, str]
) -> None:
    refusal = "questions.0 ('confirm').requested_schema: type must be \"object\""
    reports: list[tuple[int, dict[str, Any]]] = []
    gateway = FastAPI()

    @gateway.post("/hook")
    async def hook(request: Request) -> JSONResponse:
        # As the gateway answers a question no answer could fit.
        body = await request.json()
        status = 422 if body["status"] == "input_required" else 200
        reports.append((status, body))
        error = {"error": {"code": "invalid_question", "message": refusal}}
        return JSONResponse(error if status == 422 else {"ok": True}, status_code=status)

    await set_faults(client, purge_schemas={"broken": {"type": 12}})
    async with serving(gateway) as url:
        started = await client.post(
            "/purges",
            json={"dataset": "broken", "callback_url": f"{url}/hook", "callback_token": "t"},
            headers={"Idempotency-Key": "key-broken"},
        )
        job_id = started.json()["job_id"]

        async def final() -> dict[str, Any] | None:
            return reports[1][1] if len(reports) > 1 else None

        failed = await eventually(final, "the purge's final report")
        await idle(systems_app[0])

    error = {
        "code": "question_refused",
        "message": f"the purge's question was refused: {refusal}",
        "retryable": False,
    }
    assert reports[0][1]["questions"][0]["requested_schema"] == {"type": 12}
    assert failed == {"status": "failed", "error": error}
    assert len(reports) == 2  # at once, and once: the refusal is the receiver's final word
    view = (await client.get(f"/purges/{job_id}")).json()
    assert view == {"job_id": job_id, "status": "failed", "error": error}
    assert (await answer(client, job_id, content={"confirm": True})).status_code == 409


async def test_a_purge_starts_once_per_key_and_needs_a_callback(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    body = {
        "dataset": "staging_events",
        "callback_url": f"{receiver.url}/hooks/k",
        "callback_token": "t",
    }
    headers = {"Idempotency-Key": "key-once"}
    first = await client.post("/purges", json=body, headers=headers)
    again = await client.post("/purges", json=body, headers=headers)
    other = await client.post("/purges", json={**body, "dataset": "other"}, headers=headers)
    no_callback = await client.post(
        "/purges", json={"dataset": "staging_events"}, headers={"Idempotency-Key": "key-none"}
    )

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["job_id"] == first.json()["job_id"]
    assert other.status_code == 422
    assert no_callback.status_code == 422
    assert {item["loc"][-1] for item in no_callback.json()["detail"]} == {
        "callback_url",
        "callback_token",
    }
    seen = await stats(client)
    assert seen["keys"]["key-once"]["jobs_created"] == 1
    assert seen["purges"]["started"] == 1


# --- PurgeService --------------------------------------------------------------------------


@pytest.fixture
async def service(
    client: httpx.AsyncClient, systems_app: tuple[FastAPI, str]
) -> AsyncIterator[PurgeService]:
    async with httpx.AsyncClient() as http:
        yield PurgeService(http, systems_app[1])


async def test_the_service_starts_a_purge_and_delivers_the_answer(
    service: PurgeService, client: httpx.AsyncClient, receiver: Receiver
) -> None:
    job = await service.start(
        PurgeArgs(dataset="staging_events"), context("wf-1/call-1", f"{receiver.url}/hooks/svc")
    )
    question = await hook_number(receiver, "svc", 1)

    confirm = JobAnswer(key="confirm", action="accept", content={"confirm": True}, responder="dana")
    await service.answer(job.job_id, confirm)
    await service.answer(job.job_id, confirm)  # a retried delivery: no error, not applied again
    final = await hook_number(receiver, "svc", 2)

    assert job.job_id.startswith("prg_")
    assert question.authorization == "Bearer token-abc"
    assert question.body["status"] == "input_required"
    assert final.body["result"]["confirmed_by"] == "dana"
    assert (await service.status(job.job_id)).status == "succeeded"
    purges = (await stats(client))["purges"]
    assert (purges["answers_received"], purges["answers_applied"]) == (2, 1)


async def test_answers_the_service_refuses_are_tool_errors(
    service: PurgeService, client: httpx.AsyncClient, receiver: Receiver
) -> None:
    job = await service.start(
        PurgeArgs(dataset="staging_events"), context("wf-2/call-1", f"{receiver.url}/hooks/r")
    )
    await hook_number(receiver, "r", 1)
    confirm = JobAnswer(key="confirm", action="accept", content={"confirm": True})

    with pytest.raises(ToolError) as unknown_key:
        await service.answer(job.job_id, JobAnswer(key="really", action="decline"))
    with pytest.raises(ToolError) as unknown_job:
        await service.answer("prg_nope", confirm)
    await service.cancel(job.job_id)
    with pytest.raises(ToolError) as ended:
        await service.answer(job.job_id, confirm)

    assert str(unknown_key.value) == (
        f"purge service: purge job {job.job_id} has asked no question 'really'"
    )
    assert str(unknown_job.value) == "purge service: the purge service has no job 'prg_nope'"
    assert str(ended.value) == (
        f"purge service: purge job {job.job_id} has ended (cancelled); it takes no answers"
    )
    assert not isinstance(ended.value, ServiceError)
    assert (await stats(client))["purges"]["answers_applied"] == 0


async def test_an_unavailable_service_is_retryable(closed_port: int) -> None:
    confirm = JobAnswer(key="confirm", action="accept", content={"confirm": True})
    unavailable = httpx.MockTransport(lambda _: httpx.Response(503, json={"detail": "down"}))
    async with httpx.AsyncClient(transport=unavailable) as http:
        with pytest.raises(ServiceError) as answered_503:
            await PurgeService(http, "http://systems.test").answer("prg_1", confirm)
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.TransportError):
            await PurgeService(http, f"http://127.0.0.1:{closed_port}").answer("prg_1", confirm)

    assert answered_503.value.status_code == 503
    assert not isinstance(answered_503.value, ToolError)


async def test_purge_tool_is_a_callback_tool_a_person_confirms() -> None:
    async with httpx.AsyncClient() as http:
        backend = PurgeService(http, "http://systems.test")
        spec = purge_tool(backend)
        by_model = InputPolicy(answered_by="model", timeout=timedelta(minutes=5))
        other = purge_tool(backend, input=by_model, timeout=timedelta(hours=2), mode="handle")

    long = assert_long_tool(spec, "purge_dataset", backend, "callback")
    assert "asks a person to confirm" in spec.description
    assert long.input == PURGE_CONFIRMATION
    assert (PURGE_CONFIRMATION.answered_by, PURGE_CONFIRMATION.on_timeout) == (
        "person",
        "decline",
    )
    assert other.long is not None
    assert (other.long.input, other.long.timeout, other.long.mode) == (
        by_model,
        timedelta(hours=2),
        "handle",
    )
