"""The demo systems over real HTTP: idempotent starts, webhooks, cancels, faults and hooks."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from fastapi import FastAPI

from examples.systems import DemoSystems, WebhookRetry, create_app, serving
from tests.examples.systems_helpers import Receiver, idle, set_faults, stats, systems_app_fixture
from tests.helpers import eventually, exit_and_last_error, taken_port

EXPORT_SECONDS = 0.2
PIPELINE_SECONDS = 0.3
ROOT = Path(__file__).resolve().parents[2]
COMMAND = (sys.executable, "-m", "examples.systems")  # the demo systems from the command line
T = TypeVar("T")


systems_app = systems_app_fixture(export_seconds=EXPORT_SECONDS, pipeline_seconds=PIPELINE_SECONDS)


async def start_export(
    client: httpx.AsyncClient,
    key: str,
    dataset: str = "transactions",
    period: str = "2025-Q3",
    **callback: str,
) -> httpx.Response:
    return await client.post(
        "/exports",
        json={"dataset": dataset, "period": period, **callback},
        headers={"Idempotency-Key": key},
    )


async def finished(client: httpx.AsyncClient, path: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        body: dict[str, Any] = (await client.get(path)).json()
        return body if body["status"] != "running" else None

    return await eventually(check, f"{path} to end")


# --- Idempotent start ----------------------------------------------------------------------


async def test_start_without_idempotency_key_is_refused(client: httpx.AsyncClient) -> None:
    response = await client.post("/exports", json={"dataset": "transactions", "period": "2025-Q3"})

    assert response.status_code == 400
    assert response.json() == {"detail": "the Idempotency-Key header is required"}
    assert (await stats(client))["jobs"] == {}


async def test_same_key_twice_returns_the_same_job(client: httpx.AsyncClient) -> None:
    first = await start_export(client, "key-1")
    second = await start_export(client, "key-1")

    assert first.status_code == 201
    assert first.json()["status"] == "running"
    assert first.json()["eta_seconds"] == 1
    assert second.status_code == 200
    assert second.json()["job_id"] == first.json()["job_id"]
    seen = await stats(client)
    assert seen["keys"]["key-1"] == {
        "kind": "export",
        "starts": 2,
        "jobs_created": 1,
        "cancels": 0,
        "job_id": first.json()["job_id"],
    }
    assert list(seen["jobs"]) == [first.json()["job_id"]]


async def test_concurrent_starts_with_one_key_create_one_job(client: httpx.AsyncClient) -> None:
    responses = await asyncio.gather(*(start_export(client, "key-c") for _ in range(3)))

    assert sorted(r.status_code for r in responses) == [200, 200, 201]
    assert len({r.json()["job_id"] for r in responses}) == 1
    seen = await stats(client)
    assert seen["keys"]["key-c"]["starts"] == 3
    assert seen["keys"]["key-c"]["jobs_created"] == 1
    assert len(seen["jobs"]) == 1


async def test_a_key_reused_for_another_request_is_refused(client: httpx.AsyncClient) -> None:
    await start_export(client, "key-r", period="2025-Q3")
    other_period = await start_export(client, "key-r", period="2025-Q4")
    other_service = await client.post(
        "/pipelines/enrich", json={"dataset": "transactions"}, headers={"Idempotency-Key": "key-r"}
    )

    for response in (other_period, other_service):
        assert response.status_code == 422
        assert "was already used for a different request" in response.json()["detail"]
    assert (await stats(client))["keys"]["key-r"]["jobs_created"] == 1


async def test_invalid_arguments_are_refused_with_readable_reasons(
    client: httpx.AsyncClient,
) -> None:
    response = await start_export(client, "key-bad", dataset="Transactions!", period="Q3 2025")

    assert response.status_code == 422
    messages = {item["loc"][-1]: item["msg"] for item in response.json()["detail"]}
    assert "dataset must be 1-100 lowercase letters" in messages["dataset"]
    assert "period must be a quarter like '2025-Q3'" in messages["period"]
    assert (await stats(client))["jobs"] == {}


# --- Completion and webhooks ---------------------------------------------------------------


async def test_export_succeeds_and_calls_back_with_the_token(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    started = await start_export(
        client, "key-w", callback_url=f"{receiver.url}/hooks/a", callback_token="secret-token"
    )
    job_id = started.json()["job_id"]

    body = await finished(client, f"/exports/{job_id}")
    hook = await eventually(lambda: _first(receiver.hooks), "the webhook")

    assert body["status"] == "succeeded"
    assert body["job_id"] == job_id
    assert body["progress"] == "100%"
    result = body["result"]
    assert result["file"] == "exports/transactions-2025-Q3.csv"
    assert 100_000 <= result["rows"] < 1_000_000
    assert (hook.name, hook.authorization, hook.body) == (
        "a",
        "Bearer secret-token",
        {"status": "succeeded", "result": result},
    )
    assert hook.webhook_id is not None and hook.webhook_id.startswith("whk_")
    # The same request always yields the same row count.
    assert (await client.get("/exports/files/exports/transactions-2025-Q3.csv")).json() == result
    job = (await stats(client))["jobs"][job_id]
    assert job["status"] == "succeeded"
    assert job["callback_url"] == f"{receiver.url}/hooks/a"
    [webhook] = job["webhooks"]
    assert webhook.pop("webhook_id").startswith("whk_")
    assert webhook.pop("after_seconds") == 0
    assert job["webhooks"] == [
        {
            "report": "succeeded",
            "delivery": 1,
            "attempt": 1,
            "status_code": 200,
            "answer": '{"answered":200}',
            "error": None,
        }
    ]


async def test_a_repeated_start_keeps_the_first_callback(
    client: httpx.AsyncClient, receiver: Receiver, systems_app: tuple[FastAPI, str]
) -> None:
    await start_export(
        client, "key-f", callback_url=f"{receiver.url}/hooks/first", callback_token="t1"
    )
    await start_export(
        client, "key-f", callback_url=f"{receiver.url}/hooks/second", callback_token="t2"
    )

    hook = await eventually(lambda: _first(receiver.hooks), "the webhook")
    await idle(systems_app[0])

    assert [(h.name, h.authorization) for h in receiver.hooks] == [("first", "Bearer t1")]
    assert hook.body["status"] == "succeeded"


async def test_cancel_stops_the_job_and_its_webhook(
    client: httpx.AsyncClient, receiver: Receiver, systems_app: tuple[FastAPI, str]
) -> None:
    started = await start_export(
        client, "key-x", callback_url=f"{receiver.url}/hooks/x", callback_token="t"
    )
    job_id = started.json()["job_id"]

    first = await client.post(f"/exports/{job_id}/cancel")
    again = await client.post(f"/exports/{job_id}/cancel")
    await idle(systems_app[0])

    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() == {"job_id": job_id, "status": "cancelled"}
    assert (await client.get(f"/exports/{job_id}")).json()["status"] == "cancelled"
    assert receiver.hooks == []
    seen = await stats(client)
    assert seen["keys"]["key-x"]["cancels"] == 2
    assert seen["jobs"][job_id]["status"] == "cancelled"
    assert seen["jobs"][job_id]["webhooks"] == []
    # A cancelled export produces no file.
    assert (await client.get("/exports/files/exports/transactions-2025-Q3.csv")).status_code == 404


async def test_cancelling_a_finished_job_leaves_it_finished(client: httpx.AsyncClient) -> None:
    job_id = (await start_export(client, "key-done")).json()["job_id"]
    await finished(client, f"/exports/{job_id}")

    response = await client.post(f"/exports/{job_id}/cancel")

    assert response.status_code == 200
    assert response.json()["status"] == "succeeded"
    assert (await stats(client))["keys"]["key-done"]["cancels"] == 1


async def test_unknown_jobs_are_404(client: httpx.AsyncClient) -> None:
    pipeline_job = (
        await client.post(
            "/pipelines/enrich", json={"dataset": "x"}, headers={"Idempotency-Key": "k"}
        )
    ).json()["job_id"]

    for response in (
        await client.get("/exports/exp_nope"),
        await client.post("/exports/exp_nope/cancel"),
        await client.get("/pipelines/jobs/enr_nope"),
        await client.post("/pipelines/jobs/enr_nope/cancel"),
        # A job is only known to its own service.
        await client.get(f"/exports/{pipeline_job}"),
    ):
        assert response.status_code == 404
        assert "has no job" in response.json()["detail"]


# --- Faults --------------------------------------------------------------------------------


async def test_faults_change_only_the_fields_sent(client: httpx.AsyncClient) -> None:
    await set_faults(client, fail_next_starts=2)
    current = await set_faults(client, never_complete=True)

    assert current["fail_next_starts"] == 2
    assert current["never_complete"] is True
    assert (await stats(client))["faults"] == current
    assert (await client.post("/_test/faults", json={"duplicate_webhooks": 0})).status_code == 422


async def test_never_complete_keeps_jobs_running(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    await set_faults(client, never_complete=True)
    started = await start_export(
        client, "key-n", callback_url=f"{receiver.url}/hooks/n", callback_token="t"
    )
    job_id = started.json()["job_id"]

    # A never-completing job has no task to wait for: wait instead for a job started after it,
    # of the same duration, to end (jobs of one duration end in the order they started).
    await set_faults(client, never_complete=False)
    later = (await start_export(client, "key-later", dataset="later")).json()["job_id"]
    assert (await finished(client, f"/exports/{later}"))["status"] == "succeeded"

    assert (await client.get(f"/exports/{job_id}")).json() == {
        "job_id": job_id,
        "status": "running",
        "progress": "99%",
    }
    assert receiver.hooks == []
    # It can still be cancelled.
    assert (await client.post(f"/exports/{job_id}/cancel")).json()["status"] == "cancelled"


async def test_fail_jobs_ends_jobs_failed_and_reports_why(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    error = {"code": "quota_exceeded", "message": "export quota used up", "retryable": True}
    await set_faults(client, fail_jobs=error)
    started = await start_export(
        client, "key-e", callback_url=f"{receiver.url}/hooks/e", callback_token="t"
    )
    job_id = started.json()["job_id"]

    body = await finished(client, f"/exports/{job_id}")
    hook = await eventually(lambda: _first(receiver.hooks), "the webhook")

    assert body == {"job_id": job_id, "status": "failed", "error": error}
    assert hook.body == {"status": "failed", "error": error}
    assert (await client.get("/exports/files/exports/transactions-2025-Q3.csv")).status_code == 404


async def test_fail_next_starts_answers_503_before_creating_a_job(
    client: httpx.AsyncClient,
) -> None:
    await set_faults(client, fail_next_starts=1)

    refused = await start_export(client, "key-503")
    after_refusal = await stats(client)
    accepted = await start_export(client, "key-503")

    assert refused.status_code == 503
    assert "temporarily unavailable" in refused.json()["detail"]
    assert after_refusal["keys"]["key-503"]["jobs_created"] == 0
    assert after_refusal["jobs"] == {}
    assert accepted.status_code == 201
    seen = await stats(client)
    assert seen["keys"]["key-503"]["starts"] == 2
    assert seen["keys"]["key-503"]["jobs_created"] == 1
    assert seen["faults"]["fail_next_starts"] == 0


async def test_accept_then_fail_creates_the_job_the_caller_never_sees(
    client: httpx.AsyncClient,
) -> None:
    await set_faults(client, accept_then_fail_next_starts=1)

    refused = await start_export(client, "key-lost")
    created = (await stats(client))["keys"]["key-lost"]
    retried = await start_export(client, "key-lost")

    assert refused.status_code == 503
    assert created["jobs_created"] == 1
    assert retried.status_code == 200
    assert retried.json()["job_id"] == created["job_id"]
    assert (await stats(client))["keys"]["key-lost"]["jobs_created"] == 1


async def test_duplicate_webhooks_sends_each_webhook_n_times(
    client: httpx.AsyncClient, receiver: Receiver, systems_app: tuple[FastAPI, str]
) -> None:
    await set_faults(client, duplicate_webhooks=3)
    started = await start_export(
        client, "key-d", callback_url=f"{receiver.url}/hooks/d", callback_token="t"
    )
    job_id = started.json()["job_id"]

    await eventually(lambda: _at_least(receiver.hooks, 3), "three webhooks")
    await idle(systems_app[0])  # a fourth copy would have come first

    assert len(receiver.hooks) == 3
    assert len({str(h.body) for h in receiver.hooks}) == 1
    webhooks = (await stats(client))["jobs"][job_id]["webhooks"]
    assert [(w["delivery"], w["attempt"], w["status_code"]) for w in webhooks] == [
        (1, 1, 200),
        (2, 1, 200),
        (3, 1, 200),
    ]


async def test_webhooks_are_retried_on_5xx_until_answered(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    receiver.answers.extend([503, 502])
    started = await start_export(
        client, "key-5xx", callback_url=f"{receiver.url}/hooks/r", callback_token="t"
    )
    job_id = started.json()["job_id"]

    await eventually(lambda: _at_least(receiver.hooks, 3), "three webhooks")

    webhooks = (await stats(client))["jobs"][job_id]["webhooks"]
    assert [(w["attempt"], w["status_code"]) for w in webhooks] == [(1, 503), (2, 502), (3, 200)]


async def test_progress_reports_come_in_order_before_the_final_one_each_with_its_own_id(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    await set_faults(client, progress_reports=2, duplicate_webhooks=2)
    started = await start_export(
        client, "key-progress", callback_url=f"{receiver.url}/hooks/p", callback_token="t"
    )
    job_id = started.json()["job_id"]

    await eventually(lambda: _first(receiver.hooks[5:]), "six webhooks")

    reports = [(hook.body["status"], hook.body.get("progress")) for hook in receiver.hooks]
    assert reports == [
        ("running", "33%"),
        ("running", "33%"),
        ("running", "66%"),
        ("running", "66%"),
        ("succeeded", None),
        ("succeeded", None),
    ]
    ids = [hook.webhook_id for hook in receiver.hooks]
    # A copy keeps its report's id; two reports never share one.
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[4] == ids[5]
    assert len({ids[0], ids[2], ids[4]}) == 3
    webhooks = (await stats(client))["jobs"][job_id]["webhooks"]
    assert [w["report"] for w in webhooks] == [
        "running 33%", "running 33%", "running 66%", "running 66%", "succeeded", "succeeded"
    ]  # fmt: skip


async def test_a_4xx_answer_stops_the_webhook_and_is_recorded(
    client: httpx.AsyncClient, receiver: Receiver, systems_app: tuple[FastAPI, str]
) -> None:
    receiver.answers.append(409)
    started = await start_export(
        client, "key-4xx", callback_url=f"{receiver.url}/hooks/r", callback_token="t"
    )
    job_id = started.json()["job_id"]

    await eventually(lambda: _first(receiver.hooks), "the webhook")
    await idle(systems_app[0])  # a retry would have come first

    assert len(receiver.hooks) == 1
    webhooks = (await stats(client))["jobs"][job_id]["webhooks"]
    for webhook in webhooks:
        webhook.pop("webhook_id")
        webhook.pop("after_seconds")
    assert webhooks == [
        {
            "report": "succeeded",
            "delivery": 1,
            "attempt": 1,
            "status_code": 409,
            "answer": '{"answered":409}',
            "error": None,
        }
    ]


async def test_an_unreachable_receiver_is_retried_with_backoff_then_given_up(
    client: httpx.AsyncClient, closed_port: int, systems_app: tuple[FastAPI, str]
) -> None:
    # Sent again 0.5 s, then 1 s after: the next wait (2 s) would end past 2 s.
    await set_faults(client, export_seconds=0, webhook_give_up_seconds=2)
    started = await start_export(
        client,
        "key-down",
        callback_url=f"http://127.0.0.1:{closed_port}/hook",
        callback_token="t",
    )
    job_id = started.json()["job_id"]

    async def all_attempts() -> list[dict[str, Any]] | None:
        # Done once the third attempt has its outcome recorded, not merely begun.
        webhooks: list[dict[str, Any]] = (await stats(client))["jobs"][job_id]["webhooks"]
        return webhooks if len(webhooks) == 3 and webhooks[-1]["error"] else None

    webhooks = await eventually(all_attempts, "three attempts, each with its outcome")
    await idle(systems_app[0])  # the job's task is over: no fourth attempt can come

    assert [w["attempt"] for w in (await stats(client))["jobs"][job_id]["webhooks"]] == [1, 2, 3]
    assert all(w["status_code"] is None and "ConnectError" in w["error"] for w in webhooks)
    # Backoff that doubles: at least 0.5 s, then at least 1 s more.
    sent = [w["after_seconds"] for w in webhooks]
    assert sent[0] == 0 and sent[1] >= 0.5 and sent[2] - sent[1] >= 1.0, sent
    # The job itself succeeded: a lost webhook does not undo it.
    assert (await client.get(f"/exports/{job_id}")).json()["status"] == "succeeded"


async def test_a_receiver_that_is_unwell_for_a_while_gets_the_report_in_the_end(
    receiver: Receiver,
) -> None:
    # Six answers that say "not now" (a gateway restarting, busy, rate limiting), then 200:
    # senders keep trying for minutes, not four times in under a second. Quick waits here.
    receiver.answers.extend([503, 502, 429, 408, 503, 503])
    retry = WebhookRetry(first=0.05, cap=0.2, give_up_after=60)
    app = create_app(export_seconds=0, webhook_retry=retry)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        started = await start_export(
            client, "key-unwell", callback_url=f"{receiver.url}/hooks/u", callback_token="t"
        )
        job_id = started.json()["job_id"]

        async def delivered() -> list[dict[str, Any]] | None:
            webhooks: list[dict[str, Any]] = (await stats(client))["jobs"][job_id]["webhooks"]
            return webhooks if webhooks and webhooks[-1]["status_code"] == 200 else None

        webhooks = await eventually(delivered, "the report to be taken")

    assert [(w["attempt"], w["status_code"]) for w in webhooks] == [
        (1, 503), (2, 502), (3, 429), (4, 408), (5, 503), (6, 503), (7, 200)
    ]  # fmt: skip
    assert len({w["webhook_id"] for w in webhooks}) == 1, "one report, sent seven times"
    assert len(receiver.hooks) == 7


def test_by_default_a_webhook_is_sent_again_for_ten_minutes_with_backoff_up_to_30_s() -> None:
    delays = list(WebhookRetry().delays())

    assert delays[:7] == [0.5, 1, 2, 4, 8, 16, 30]
    assert set(delays[6:]) == {30}
    assert 570 < sum(delays) <= 600
    assert list(WebhookRetry(give_up_after=0).delays()) == []


async def test_duration_overrides_apply_to_new_jobs(client: httpx.AsyncClient) -> None:
    await set_faults(client, export_seconds=5, pipeline_seconds=0)

    export = await start_export(client, "key-slow")
    enrich = await client.post(
        "/pipelines/enrich", json={"dataset": "customers"}, headers={"Idempotency-Key": "key-fast"}
    )
    body = await finished(client, f"/pipelines/jobs/{enrich.json()['job_id']}")

    assert export.json()["eta_seconds"] == 5
    assert body["status"] == "succeeded"
    export_now = (await client.get(f"/exports/{export.json()['job_id']}")).json()
    assert export_now["status"] == "running"


# --- Enrichment pipeline -------------------------------------------------------------------


async def test_pipeline_reports_growing_progress_then_succeeds(client: httpx.AsyncClient) -> None:
    started = await client.post(
        "/pipelines/enrich", json={"dataset": "transactions"}, headers={"Idempotency-Key": "p1"}
    )
    again = await client.post(
        "/pipelines/enrich", json={"dataset": "transactions"}, headers={"Idempotency-Key": "p1"}
    )
    job_id = started.json()["job_id"]
    progress = []

    async def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = (await client.get(f"/pipelines/jobs/{job_id}")).json()
        if body["status"] == "running":
            progress.append(int(body["progress"].rstrip("%")))
            return None
        return body

    body = await eventually(ended, f"enrichment {job_id} to end")

    assert started.status_code == 201
    assert again.status_code == 200
    assert again.json()["job_id"] == job_id
    assert len(set(progress)) >= 3
    assert progress == sorted(progress)
    assert all(0 <= p < 100 for p in progress)
    assert body["status"] == "succeeded"
    assert body["progress"] == "100%"
    assert body["result"]["dataset"] == "transactions"
    assert isinstance(body["result"]["enriched_rows"], int)
    assert (await stats(client))["jobs"][job_id]["webhooks"] == []


async def test_pipeline_cancel(client: httpx.AsyncClient, systems_app: tuple[FastAPI, str]) -> None:
    started = await client.post(
        "/pipelines/enrich", json={"dataset": "transactions"}, headers={"Idempotency-Key": "p2"}
    )
    job_id = started.json()["job_id"]

    cancelled = await client.post(f"/pipelines/jobs/{job_id}/cancel")
    await idle(systems_app[0])

    assert cancelled.json() == {"job_id": job_id, "status": "cancelled"}
    assert (await client.get(f"/pipelines/jobs/{job_id}")).json()["status"] == "cancelled"
    assert (await stats(client))["keys"]["p2"]["cancels"] == 1


# --- Compliance folder and notifications ---------------------------------------------------


async def test_folders_take_only_files_an_export_produced(client: httpx.AsyncClient) -> None:
    file = "exports/invoices-2025-07.csv"
    before = await client.get(f"/exports/files/{file}")
    refused = await client.put("/folders/compliance/files", json={"file": file})

    job_id = (await start_export(client, "key-i", dataset="invoices", period="2025-07")).json()[
        "job_id"
    ]
    rows = (await finished(client, f"/exports/{job_id}"))["result"]["rows"]
    uploaded = await client.put("/folders/compliance/files", json={"file": file})
    again = await client.put("/folders/compliance/files", json={"file": file})

    assert before.status_code == refused.status_code == 404
    assert refused.json() == {"detail": f"no export produced {file!r}"}
    assert (
        uploaded.json()
        == again.json()
        == {
            "path": "compliance/invoices-2025-07.csv",
            "file": file,
            "rows": rows,
        }
    )
    assert (await client.get("/folders/compliance/files")).json() == [uploaded.json()]
    assert (await client.get("/folders/other/files")).json() == []
    bad_folder = await client.put("/folders/Bad Folder/files", json={"file": file})
    assert bad_folder.status_code == 422


async def test_notifications_are_recorded(client: httpx.AsyncClient) -> None:
    first = await client.post("/notifications", json={"team": "compliance", "message": "done"})
    second = await client.post("/notifications", json={"team": "finance", "message": "also"})

    assert first.status_code == 201
    assert first.json() == {"id": "ntf_1"}
    assert second.json() == {"id": "ntf_2"}
    assert (await client.get("/notifications")).json() == [
        {"id": "ntf_1", "team": "compliance", "message": "done"},
        {"id": "ntf_2", "team": "finance", "message": "also"},
    ]


# --- Reset, shutdown and the command line --------------------------------------------------


async def test_reset_forgets_everything_and_stops_pending_webhooks(
    client: httpx.AsyncClient, receiver: Receiver, systems_app: tuple[FastAPI, str]
) -> None:
    await set_faults(client, export_seconds=0.2)
    await start_export(client, "key-z", callback_url=f"{receiver.url}/hooks/z", callback_token="t")
    await client.post("/notifications", json={"team": "t", "message": "m"})

    assert (await client.post("/_test/reset")).status_code == 204
    seen = await stats(client)
    systems: DemoSystems = systems_app[0].state.systems
    tasks = set(systems.long_jobs.tasks)
    # A job of the same duration started now calls back after the forgotten one would have.
    await set_faults(client, export_seconds=0.2)
    await start_export(
        client,
        "key-later",
        dataset="later",
        callback_url=f"{receiver.url}/hooks/later",
        callback_token="t",
    )
    await idle(systems_app[0])

    assert seen["keys"] == seen["jobs"] == {}
    assert seen["faults"]["export_seconds"] is None
    assert (await client.get("/notifications")).json() == []
    assert tasks == set()
    assert [hook.name for hook in receiver.hooks] == ["later"]


async def test_shutdown_cancels_running_jobs() -> None:
    app = create_app(export_seconds=30)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        started = await start_export(client, "key-s")
        systems: DemoSystems = app.state.systems
        timers = set(systems.long_jobs.tasks)
        assert len(timers) == 1

    assert started.status_code == 201
    assert all(task.cancelled() for task in timers)
    assert systems.long_jobs.tasks == set()


@pytest.mark.subprocess
async def test_command_line_serves_and_stops_cleanly_on_sigterm() -> None:
    process = await asyncio.create_subprocess_exec(
        *COMMAND,
        "--port",
        "0",
        "--export-seconds",
        "0.1",
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    try:
        line = (await asyncio.wait_for(process.stderr.readline(), timeout=30)).decode()
        assert "demo systems listening on http://127.0.0.1:" in line
        url = line.rsplit(" ", 1)[1].strip()
        async with httpx.AsyncClient(base_url=url) as client:
            started = await start_export(client, "key-cli")
            assert started.status_code == 201
            body = await finished(client, f"/exports/{started.json()['job_id']}")
            assert body["status"] == "succeeded"
        process.send_signal(signal.SIGTERM)
        rest = (await asyncio.wait_for(process.stderr.read(), timeout=30)).decode()
        code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    assert code == 0
    assert "demo systems stopped" in rest
    assert "Traceback" not in rest


@pytest.mark.subprocess
async def test_a_port_another_process_holds_is_one_line_naming_it_and_demo_systems_url() -> None:
    with taken_port() as port:
        code, said = await exit_and_last_error(*COMMAND, "--port", str(port), cwd=ROOT)

    assert code == 1
    assert said == (
        f"demo systems: cannot listen on 127.0.0.1:{port}: another process listens there; set "
        "DEMO_SYSTEMS_URL to a free port (`make up` starts them on its port)"
    )


async def _first(items: list[T]) -> T | None:
    return items[0] if items else None


async def _at_least(items: list[T], count: int) -> list[T] | None:
    return items if len(items) >= count else None
