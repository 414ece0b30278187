"""End to end, as a user runs it: `scripts/services.py up` (dev server with SQLite and Web UI,
worker), then `starter.py` as a subprocess, then `down`. Nothing is mocked."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Services:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.port, self.ui_port = _free_port(), _free_port()
        self.gateway_port, self.systems_port = _free_port(), _free_port()
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in (
                "OPENAI_API_KEY",
                "ANTHROPIC_API_KEY",
                "WAITSTATE_MODEL",
                "WAITSTATE_TOKEN_KEYS",
                "GATEWAY_URL",
            )
        }
        self.env.update(
            TEMPORAL_ADDRESS=f"127.0.0.1:{self.port}",
            TEMPORAL_UI_PORT=str(self.ui_port),
            WAITSTATE_STATE_DIR=str(state),
            GATEWAY_PORT=str(self.gateway_port),
            DEMO_SYSTEMS_URL=f"http://127.0.0.1:{self.systems_port}",
            WAITSTATE_WORKER_METRICS=f"127.0.0.1:{_free_port()}",
            WAITSTATE_TASK_QUEUE=f"e2e-{uuid.uuid4()}",
        )

    def services(self, action: str) -> subprocess.CompletedProcess[str]:
        return self._run([sys.executable, "scripts/services.py", action])

    def starter(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self._run([sys.executable, "starter.py", *args], env=env)

    def _run(
        self, command: list[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, cwd=ROOT, env=env or self.env, capture_output=True, text=True, timeout=120
        )

    def ui_executions(self, workflow_id: str) -> list[dict[str, Any]]:
        """The runs the Web UI's HTTP API lists for a workflow id."""
        query = urllib.parse.quote(f'WorkflowId="{workflow_id}"')
        url = f"http://127.0.0.1:{self.ui_port}/api/v1/namespaces/default/workflows?query={query}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return list(json.load(response).get("executions", []))


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    running = Services(tmp_path_factory.mktemp("state"))
    up = running.services("up")
    assert up.returncode == 0, up.stderr + up.stdout
    try:
        yield running
    finally:
        down = running.services("down")
        assert down.returncode == 0, down.stderr


def _eventually(check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_run_wait_json_prints_one_object_with_the_outcome(services: Services) -> None:
    done = services.starter(
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

    status = services.starter("status", "e2e-answer", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] == "completed"

    listed = _eventually(lambda: services.ui_executions("e2e-answer"))
    assert [e["status"] for e in listed] == ["WORKFLOW_EXECUTION_STATUS_COMPLETED"]


def test_wait_streams_each_step_then_the_answer_and_link(services: Services) -> None:
    done = services.starter("run", "What is 2 ** 10?", "--model", "scripted:demo", "--wait")

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
    assert f"http://127.0.0.1:{services.ui_port}/namespaces/default/workflows/run-" in done.stdout


def test_export_scenario_through_the_gateway(services: Services) -> None:
    done = services.starter(
        "run", "Export Q3 transactions and file them in the compliance folder", "--wait", "--json"
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed"
    assert "filed them at compliance/" in result["final_output"]
    assert result["turns"] == 5
    health = urllib.request.urlopen(f"http://127.0.0.1:{services.gateway_port}/healthz", timeout=5)
    assert json.load(health) == {"status": "ok"}


def test_refund_waits_for_a_person_then_the_cli_approves_it(services: Services) -> None:
    started = services.starter(
        "run", "Issue a refund of $420 for claim C-118", "--id", "e2e-refund", "--json"
    )
    assert started.returncode == 0, started.stderr

    def pending() -> list[dict[str, Any]]:
        listed = services.starter("pending", "--json")
        return [row for row in json.loads(listed.stdout) if row["run_id"] == "e2e-refund"]

    [row] = _eventually(pending)
    approve = services.starter("approve", "e2e-refund", "--reviewer", "dana", "--comment", "ok")
    assert approve.returncode == 0, approve.stderr

    def finished() -> dict[str, Any] | None:
        state = json.loads(services.starter("status", "e2e-refund", "--json").stdout)
        return state if state["status"] == "completed" else None

    state = _eventually(finished)
    again = services.starter("approve", "e2e-refund", "--request", row["request_id"])

    assert row["tool"] == "issue_refund"
    assert state["approvals"][row["request_id"]]["decision"]["reviewer"] == "dana"
    assert "Refunded $420 for claim C-118" in state["final_output"]
    assert again.returncode == 1 and "already" in again.stderr


def test_with_several_open_requests_the_cli_asks_which(services: Services) -> None:
    services.starter(
        "run", "two refunds", "--id", "e2e-two", "--model", "scripted:two-refunds", "--json"
    )

    def both_open() -> list[dict[str, Any]]:
        rows = json.loads(services.starter("pending", "--json").stdout)
        mine = [row for row in rows if row["run_id"] == "e2e-two"]
        return mine if len(mine) == 2 else []

    rows = _eventually(both_open)
    ambiguous = services.starter("approve", "e2e-two")
    picked = [
        services.starter("reject", "e2e-two", "--request", row["request_id"], "--reason", "no")
        for row in rows
    ]

    def finished() -> bool:
        state = json.loads(services.starter("status", "e2e-two", "--json").stdout)
        return bool(state["status"] == "completed")

    assert ambiguous.returncode == 1 and "several open requests" in ambiguous.stderr
    assert all(row["request_id"] in ambiguous.stderr for row in rows)
    assert [p.returncode for p in picked] == [0, 0]
    assert _eventually(finished)


def test_the_web_ui_lists_runs_waiting_for_approval(services: Services) -> None:
    services.starter(
        "run", "publish", "--id", "e2e-ui", "--model", "scripted:ask-first",
        "--tools", "request_approval",
    )  # fmt: skip

    def waiting() -> list[dict[str, Any]]:
        query = urllib.parse.quote('WaitingFor="approval"')
        url = (
            f"http://127.0.0.1:{services.ui_port}/api/v1/namespaces/default/workflows?query={query}"
        )
        with urllib.request.urlopen(url, timeout=10) as response:
            executions = json.load(response).get("executions", [])
        return [e for e in executions if e["execution"]["workflowId"] == "e2e-ui"]

    [run] = _eventually(waiting)
    fields = run["searchAttributes"]["indexedFields"]

    assert {"AgentStatus", "WaitingFor", "WaitExpiresAt", "PendingOperations"} <= set(fields)
    assert services.starter("approve", "e2e-ui").returncode == 0


def test_same_id_twice_is_one_run(services: Services) -> None:
    first = services.starter(
        "run", "echo me", "--id", "e2e-once", "--model", "scripted:echo", "--json"
    )
    second = services.starter(
        "run", "echo me", "--id", "e2e-once", "--model", "scripted:echo", "--json"
    )

    assert json.loads(first.stdout)["existing"] is False
    assert json.loads(second.stdout)["existing"] is True
    assert second.returncode == 0
    assert len(_eventually(lambda: services.ui_executions("e2e-once"))) == 1


def test_cancel_ends_the_run_cancelled(services: Services) -> None:
    services.starter(
        "run", "loop", "--id", "e2e-cancel", "--model", "scripted:forever", "--max-turns", "100000"
    )

    cancel = services.starter("cancel", "e2e-cancel")

    assert cancel.returncode == 0, cancel.stderr

    def cancelled() -> bool:
        status = services.starter("status", "e2e-cancel", "--json")
        return bool(json.loads(status.stdout)["status"] == "cancelled")

    assert _eventually(cancelled)


def test_clear_errors_and_exit_codes(services: Services) -> None:
    unknown = services.starter("status", "no-such-run", "--json")
    bad_spec = services.starter("run", "x", "--model", "gpt-4")
    bad_script = services.starter("run", "x", "--model", "scripted:nope")
    unreachable = services.starter(
        "list", env={**services.env, "TEMPORAL_ADDRESS": f"127.0.0.1:{_free_port()}"}
    )

    assert (unknown.returncode, unknown.stderr.strip()) == (1, "error: no run with id no-such-run")
    assert bad_spec.returncode == 2 and "is not provider:model" in bad_spec.stderr
    assert bad_script.returncode == 2 and "no script named 'nope'" in bad_script.stderr
    assert unreachable.returncode == 2 and "cannot reach Temporal" in unreachable.stderr
    for result in (unknown, bad_spec, bad_script, unreachable):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_up_is_idempotent_and_a_restart_loses_nothing(services: Services) -> None:
    services.starter("run", "keep me", "--id", "e2e-durable", "--model", "scripted:echo", "--wait")

    again = services.services("up")
    assert again.returncode == 0
    for name in ("server", "systems", "worker", "gateway"):
        assert f"{name} already running" in again.stdout

    assert services.services("down").returncode == 0
    worker_log = (services.state / "worker.log").read_text()
    assert worker_log.rstrip().endswith("waitstate.worker: stopped"), "SIGTERM stops it cleanly"
    assert services.services("up").returncode == 0
    status = services.starter("status", "e2e-durable", "--json")

    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] == "completed"
    assert "keep me" in json.loads(status.stdout)["final_output"]
