"""End to end, as a user runs it: `scripts/services.py up` (dev server with SQLite and Web UI,
demo systems, worker, gateway), then `starter.py` as a subprocess, then `down`. Nothing is
mocked."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from examples.demo.refunds import IssueRefundArgs, refund_idempotency_key
from tests.helpers import callback_token, eventually, quiet_history_length
from tests.rigs import Services, free_port, port_open
from tests.tiers import SUBPROCESS, TEMPORAL, needs
from waitstate.schemas import RunResult, RunState
from waitstate.workflows.agent_run import AgentRunWorkflow

ROOT = Path(__file__).resolve().parent.parent
EXPORT_TASK = "Export Q3 transactions and file them in the compliance folder"
EXPORT_FILE = "exports/transactions-2025-Q3.csv"
# Runs take seconds; these bounds only turn a hang into a failure.
RUN_WITHIN = 90.0


@pytest.fixture(scope="module")
@needs(TEMPORAL, SUBPROCESS)
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    with Services(tmp_path_factory.mktemp("state")).up() as running:
        yield running


async def test_run_wait_json_prints_one_object_with_the_outcome(services: Services) -> None:
    done = await services.starter(
        "run",
        "What is 6 * 7?",
        "--id",
        "e2e-answer",
        "--model",
        "scripted:demo",
        "--wait",
        "--json",
    )

    assert done.returncode == 0, done.stderr
    [line] = done.stdout.strip().splitlines()
    result = json.loads(line)
    assert result["status"] == "completed"
    assert "calculate -> 42" in result["final_output"]
    assert (result["turns"], result["tool_calls"]) == (3, 3)
    assert result["usage"]["model_calls"] == 3

    assert (await services.status("e2e-answer"))["status"] == "completed"

    async def listed() -> list[dict[str, Any]]:
        return await services.ui_executions('WorkflowId="e2e-answer"')

    executions = await eventually(listed, "the Web UI to list e2e-answer")
    assert [e["status"] for e in executions] == ["WORKFLOW_EXECUTION_STATUS_COMPLETED"]


async def test_wait_streams_each_step_then_the_answer_and_link(services: Services) -> None:
    done = await services.starter("run", "What is 2 ** 10?", "--model", "scripted:demo", "--wait")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    steps = [line.split(": ")[0].split() for line in lines if line.startswith("  turn")]
    assert steps == [
        ["turn", "1", "model", "scripted:demo"],
        ["turn", "1", "tool", "calculate"],
        ["turn", "1", "tool", "utc_now"],
        ["turn", "2", "model", "scripted:demo"],
        ["turn", "2", "tool", "count_words"],
        ["turn", "3", "model", "scripted:demo"],
    ]
    assert any(line.startswith("answer: ") and "1024" in line for line in lines)
    assert f"{services.ui_url}/namespaces/default/workflows/run-" in done.stdout


async def test_export_scenario_through_the_gateway(services: Services) -> None:
    done = await services.starter("run", EXPORT_TASK, "--wait", "--json")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed"
    assert "filed them at compliance/" in result["final_output"]
    assert result["turns"] == 5
    async with httpx.AsyncClient(timeout=10) as http:
        health = await http.get(f"{services.gateway_url}/healthz")
    assert health.json() == {"status": "ok"}


async def test_refund_waits_for_a_person_then_the_cli_approves_it(services: Services) -> None:
    started = await services.starter(
        "run", "Issue a refund of $420 for claim C-118", "--id", "e2e-refund", "--json"
    )
    assert started.returncode == 0, started.stderr

    async def pending() -> list[dict[str, Any]]:
        listed = await services.starter("pending", "--json")
        return [row for row in json.loads(listed.stdout) if row["run_id"] == "e2e-refund"]

    [row] = await eventually(pending, "e2e-refund among the pending runs")
    approve = await services.starter(
        "approve", "e2e-refund", "--reviewer", "dana", "--comment", "ok"
    )
    assert approve.returncode == 0, approve.stderr

    async def completed() -> dict[str, Any] | None:
        state = await services.status("e2e-refund")
        return state if state["status"] == "completed" else None

    state = await eventually(completed, "e2e-refund to complete")
    again = await services.starter("approve", "e2e-refund", "--request", row["request_id"])

    assert row["tool"] == "issue_refund"
    assert state["approvals"][row["request_id"]]["decision"]["reviewer"] == "dana"
    assert "Refunded $420 for claim C-118" in state["final_output"]
    assert again.returncode == 1 and "already" in again.stderr


async def test_with_several_open_requests_the_cli_asks_which(services: Services) -> None:
    await services.starter(
        "run", "two refunds", "--id", "e2e-two", "--model", "scripted:two-refunds", "--json"
    )

    async def both_open() -> list[dict[str, Any]]:
        rows = json.loads((await services.starter("pending", "--json")).stdout)
        mine = [row for row in rows if row["run_id"] == "e2e-two"]
        return mine if len(mine) == 2 else []

    rows = await eventually(both_open, "two open requests of e2e-two")
    ambiguous = await services.starter("approve", "e2e-two")
    picked = [
        await services.starter(
            "reject", "e2e-two", "--request", row["request_id"], "--reason", "no"
        )
        for row in rows
    ]

    async def completed() -> bool:
        return (await services.status("e2e-two"))["status"] == "completed"

    assert ambiguous.returncode == 1 and "several open requests" in ambiguous.stderr
    assert all(row["request_id"] in ambiguous.stderr for row in rows)
    assert [p.returncode for p in picked] == [0, 0]
    await eventually(completed, "e2e-two to complete")


async def test_the_web_ui_lists_runs_waiting_for_approval(services: Services) -> None:
    await services.starter(
        "run", "publish", "--id", "e2e-ui", "--model", "scripted:ask-first",
        "--tools", "request_approval",
    )  # fmt: skip

    async def waiting() -> list[dict[str, Any]]:
        executions = await services.ui_executions('WaitingFor="approval"')
        return [e for e in executions if e["execution"]["workflowId"] == "e2e-ui"]

    [run] = await eventually(waiting, "the Web UI to list e2e-ui as waiting for approval")
    fields = run["searchAttributes"]["indexedFields"]

    assert {"AgentStatus", "WaitingFor", "WaitExpiresAt", "PendingOperations"} <= set(fields)
    assert (await services.starter("approve", "e2e-ui")).returncode == 0


async def test_same_id_twice_is_one_run(services: Services) -> None:
    first = await services.starter(
        "run", "echo me", "--id", "e2e-once", "--model", "scripted:echo", "--json"
    )
    second = await services.starter(
        "run", "echo me", "--id", "e2e-once", "--model", "scripted:echo", "--json"
    )

    async def listed() -> list[dict[str, Any]]:
        return await services.ui_executions('WorkflowId="e2e-once"')

    assert json.loads(first.stdout)["existing"] is False
    assert json.loads(second.stdout)["existing"] is True
    assert second.returncode == 0
    assert len(await eventually(listed, "the Web UI to list e2e-once")) == 1


async def test_cancel_ends_the_run_cancelled(services: Services) -> None:
    await services.starter(
        "run", "loop", "--id", "e2e-cancel", "--model", "scripted:forever", "--max-turns", "100000"
    )

    cancel = await services.starter("cancel", "e2e-cancel")

    assert cancel.returncode == 0, cancel.stderr

    async def cancelled() -> bool:
        return (await services.status("e2e-cancel"))["status"] == "cancelled"

    await eventually(cancelled, "e2e-cancel to end cancelled")


async def test_clear_errors_and_exit_codes(services: Services) -> None:
    unknown = await services.starter("status", "no-such-run", "--json")
    bad_spec = await services.starter("run", "x", "--model", "gpt-4")
    bad_script = await services.starter("run", "x", "--model", "scripted:nope")
    unreachable = await services.starter(
        "list", env={**services.env, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}
    )

    assert (unknown.returncode, unknown.stderr.strip()) == (1, "error: no run with id no-such-run")
    assert bad_spec.returncode == 2 and "is not provider:model" in bad_spec.stderr
    assert bad_script.returncode == 2 and "no script named 'nope'" in bad_script.stderr
    assert unreachable.returncode == 2 and "cannot reach Temporal" in unreachable.stderr
    for result in (unknown, bad_spec, bad_script, unreachable):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


async def _state(handle: WorkflowHandle[Any, Any]) -> RunState:
    state: RunState = await handle.query(AgentRunWorkflow.status)
    return state


async def _accepted_updates(handle: WorkflowHandle[Any, Any]) -> int:
    accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    return len([e async for e in handle.fetch_history_events() if e.event_type == accepted])


async def _post_once_the_gateway_reaches_temporal(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], authorization: str
) -> httpx.Response:
    """POST as a webhook sender does after an outage: a 503 (the gateway's client is still
    reconnecting, and the request never reached a run) is retried."""

    async def answered() -> httpx.Response | None:
        response = await http.post(url, json=body, headers={"Authorization": authorization})
        return None if response.status_code == 503 else response

    return await eventually(answered, f"an answer other than 503 from {url}", within=RUN_WITHIN)


async def _export_file_rows(http: httpx.AsyncClient, systems: str) -> int:
    """Have the export service make EXPORT_FILE, and return its row count: what its webhook
    for that export says."""
    made = await http.post(
        f"{systems}/exports",
        json={"dataset": "transactions", "period": "2025-Q3"},
        headers={"Idempotency-Key": f"e2e-file-{uuid.uuid4()}"},
    )
    job_url = f"{systems}/exports/{made.raise_for_status().json()['job_id']}"

    async def made_it() -> bool:
        return (await http.get(job_url)).json()["status"] == "succeeded"

    await eventually(made_it, "the export service to make the file")
    return int((await http.get(f"{systems}/exports/files/{EXPORT_FILE}")).json()["rows"])


async def _kill_the_server(services: Services) -> None:
    os.kill(int((services.state / "server.pid").read_text()), signal.SIGKILL)

    async def gone() -> bool:
        return not port_open(services.port)

    await eventually(gone, "the killed server's port to close")


async def _start_the_server_again(services: Services) -> None:
    """`up`: starts the server again on the same SQLite file and port, and leaves the other
    services, which outlived it, running."""
    up = await services.services("up")
    assert up.returncode == 0, up.stderr + up.stdout
    assert "server started" in up.stdout, up.stdout
    for name in ("systems", "worker", "gateway"):
        assert f"{name} already running" in up.stdout


async def _two_runs_that_wait(
    services: Services, http: httpx.AsyncClient
) -> tuple[WorkflowHandle[Any, RunResult], WorkflowHandle[Any, RunResult]]:
    """A refund waiting for a person, and an export waiting for a webhook that has not come:
    its job never completes on its own, so the test sends the webhook when it chooses."""
    faults = f"{services.systems_url}/_test/faults"
    (await http.post(faults, json={"never_complete": True})).raise_for_status()
    try:
        for args in (
            ["Issue a refund of $600 for claim C-305", "--id", "e2e-kill-refund"],
            [EXPORT_TASK, "--id", "e2e-kill-export"],
        ):
            started = await services.starter("run", *args, "--json")
            assert started.returncode == 0, started.stderr
        client = await services.client()
        refund = client.get_workflow_handle_for(AgentRunWorkflow.run, "e2e-kill-refund")
        export = client.get_workflow_handle_for(AgentRunWorkflow.run, "e2e-kill-export")

        async def refund_waits() -> bool:
            return any(r.open for r in (await _state(refund)).approvals.values())

        async def export_waits() -> bool:
            operations = (await _state(export)).operations.values()
            return any(op.status == "running" for op in operations)

        await eventually(refund_waits, "the refund to wait for a person")
        await eventually(export_waits, "the export to wait for its webhook")
    finally:
        (await http.post(faults, json={"never_complete": False})).raise_for_status()
    return refund, export


async def test_a_server_killed_while_runs_wait_loses_nothing(services: Services) -> None:
    systems = services.systems_url
    async with httpx.AsyncClient(timeout=30) as http:
        rows = await _export_file_rows(http, systems)
        refund, export = await _two_runs_that_wait(services, http)
        # Nothing in flight: all a run has is what the server wrote to its database.
        await quiet_history_length(refund)
        await quiet_history_length(export)
        [request] = (await _state(refund)).approvals.values()
        [operation] = (await _state(export)).operations.values()
        notified_before = len((await http.get(f"{systems}/notifications")).json())
        # A person will use the link the run posted; the export service will send its webhook
        # with the token the run handed it.
        [notice] = [
            entry["body"]
            for entry in (await http.get(f"{systems}/approvals/outbox")).json()
            if entry["body"]["workflow_id"] == "e2e-kill-refund"
        ]
        link = notice["decision"]
        approve = {**link["approve"], "reviewer": "dana"}
        token = await callback_token(services.tokens(), export, operation)
        webhook_url = f"{services.gateway_url}/v1/operations/{operation.operation_id}/complete"
        webhook = {"status": "succeeded", "result": {"file": EXPORT_FILE, "rows": rows}}

        await _kill_the_server(services)
        # Meanwhile the gateway tells both senders to try again later.
        while_down = await asyncio.gather(
            http.post(link["url"], json=approve, headers={"Authorization": link["authorization"]}),
            http.post(webhook_url, json=webhook, headers={"Authorization": f"Bearer {token}"}),
        )
        await _start_the_server_again(services)

        async def refund_status() -> dict[str, Any] | None:
            # None until the worker, which lost the server too, answers queries again (till
            # then the CLI shows what the server alone knows: the task, no approvals).
            done = await services.starter("status", "e2e-kill-refund", "--json")
            shown: dict[str, Any] | None = json.loads(done.stdout) if done.returncode == 0 else None
            return shown if shown and shown["worker_answered"] else None

        after_restart = await eventually(refund_status, "the CLI to read the refund again")
        export_after_restart = (await _state(export)).operations[operation.operation_id]
        decided = await _post_once_the_gateway_reaches_temporal(
            http, link["url"], approve, link["authorization"]
        )
        delivered = await _post_once_the_gateway_reaches_temporal(
            http, webhook_url, webhook, f"Bearer {token}"
        )
        refund_result = await asyncio.wait_for(refund.result(), RUN_WITHIN)
        export_result = await asyncio.wait_for(export.result(), RUN_WITHIN)
        refund_state, export_state = await _state(refund), await _state(export)
        stats = (await http.get(f"{systems}/_test/stats")).json()
        refunds = (await http.get(f"{systems}/refunds")).json()
        notified = (await http.get(f"{systems}/notifications")).json()

    for refused in while_down:
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "temporal_unavailable"
    assert after_restart["status"] == "waiting"
    assert after_restart["approvals"][request.request_id]["status"] == "pending"
    assert export_after_restart.status == "running"

    assert decided.status_code == 200, decided.text
    assert refund_result.status == "completed"
    assert "Refunded $600 for claim C-305" in (refund_result.final_output or "")
    decision = refund_state.approvals[request.request_id].decision
    assert decision is not None and decision.reviewer == "dana"
    assert [r["claim_id"] for r in refunds].count("C-305") == 1, "one refund, not two"
    key = refund_idempotency_key(IssueRefundArgs(claim_id="C-305", amount=600))
    assert stats["refund_keys"][key]["requests"] == 1

    assert delivered.status_code == 200, delivered.text
    assert export_result.status == "completed"
    assert f"Exported {rows} transactions rows" in (export_result.final_output or "")
    assert "filed them at compliance/" in (export_result.final_output or "")
    [export_key] = [k for k in stats["keys"] if k.startswith("e2e-kill-export/")]
    export_stats = stats["keys"][export_key]
    assert (export_stats["starts"], export_stats["jobs_created"]) == (1, 1), "one job"
    assert export_state.operations[operation.operation_id].status == "succeeded"
    assert await _accepted_updates(export) == 1, "the completion applied once"
    assert len(notified) == notified_before + 1, "the team was told once"


async def test_up_is_idempotent_and_down_stops_the_worker_cleanly(services: Services) -> None:
    await services.starter(
        "run", "keep me", "--id", "e2e-durable", "--model", "scripted:echo", "--wait"
    )

    again = await services.services("up")
    assert again.returncode == 0
    for name in ("server", "systems", "worker", "gateway"):
        assert f"{name} already running" in again.stdout

    assert (await services.services("down")).returncode == 0
    worker_log = (services.state / "worker.log").read_text()
    assert worker_log.rstrip().endswith("waitstate.worker: stopped"), "SIGTERM stops it cleanly"
    assert (await services.services("up")).returncode == 0
    status = await services.status("e2e-durable")

    assert status["status"] == "completed"
    assert "keep me" in status["final_output"]
