"""The gateway as operators run it, `python -m waitstate.gateway` against the dev server: what
its log holds."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers import assert_error, eventually, exit_and_last_error, taken_port
from tests.rigs import ServerProcess, service_port
from tests.tiers import SUBPROCESS, needs
from waitstate.auth.tokens import ResumeTokens

KEY = ("proc", "p" * 40)


@dataclass
class Running:
    url: str
    log: Path
    tokens: ResumeTokens


@pytest.fixture
@needs(SUBPROCESS)
async def gateway(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Running]:
    port = service_port()
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "GATEWAY_PORT": str(port),
        "WAITSTATE_TOKEN_KEYS": ":".join(KEY),
        "WAITSTATE_RUN_COUNTS_SECONDS": "0",
    }
    log = tmp_path / "gateway.log"
    process = ServerProcess(["-m", "waitstate.gateway"], port, log, env)
    await process.start()
    try:
        yield Running(f"http://127.0.0.1:{port}", log, ResumeTokens(dict([KEY]), KEY[0]))
    finally:
        await process.stop()


def _pieces(token: str, size: int = 12) -> list[str]:
    """Every `size`-character stretch of the token: none may be in a log line."""
    return [token[i : i + size] for i in range(len(token) - size + 1)]


async def test_no_token_whole_or_partial_reaches_the_log(gateway: Running) -> None:
    expires_at = datetime.now(UTC) + timedelta(hours=1)
    token = gateway.tokens.mint("run-logged", "op_logged", expires_at).token
    payload, _, signature = token.partition(".")
    body = {"status": "succeeded", "result": {"rows": 1}}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
        sent = [
            # A token where the gateway does not read one: refused, and not to be logged.
            await http.post(
                "/v1/operations/op_logged/complete", params={"token": token}, json=body
            ),
            await http.post(f"/v1/operations/op_logged/complete?{token}", json=body),
            await http.post(
                "/v1/operations/op_logged/complete",
                params={"token": payload, "sig": signature},
                json=body,
            ),
            await http.post(f"/v1/operations/{token}/complete", json=body),
            await http.get("/healthz", params={"access_token": token}),
            # And where it does: a run the dev server does not have.
            await http.post(
                "/v1/operations/op_logged/complete",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            ),
        ]

        async def logged() -> bool:  # the access log's line for the last request
            return sent[-1].request.url.path in gateway.log.read_text() and all(
                f'" {response.status_code}' in gateway.log.read_text() for response in sent
            )

        await eventually(logged, "the access log's lines for every request")
    text = gateway.log.read_text()

    assert [response.status_code for response in sent] == [401, 401, 401, 401, 200, 404]
    assert_error(sent[0], 401, "missing_token")
    assert_error(sent[-1], 404)
    leaked = [piece for piece in _pieces(token) if piece in text]
    assert not leaked, f"pieces of the token in the log: {leaked[:3]}\n{text}"
    # The access log still says what was asked, without the query.
    assert text.count("POST /v1/operations/op_logged/complete?[redacted]") == 3, text
    assert "GET /healthz?[redacted]" in text


@pytest.mark.subprocess
async def test_a_port_another_process_holds_is_one_line_naming_it_and_gateway_port(
    closed_port: int,
) -> None:
    with taken_port() as port:
        env = {
            **os.environ,
            # Nothing listens there: a gateway that got as far as Temporal would say so.
            "TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}",
            "GATEWAY_PORT": str(port),
            "WAITSTATE_TOKEN_KEYS": ":".join(KEY),
            # Malformed, and only a worker's: the gateway goes on to its port.
            "WAITSTATE_MODEL_CALLS_PER_SECOND": "fast",
        }
        code, said = await exit_and_last_error(sys.executable, "-m", "waitstate.gateway", env=env)

    assert code == 1
    assert said == (
        f"gateway: cannot listen on 127.0.0.1:{port}: another process listens there; set "
        "GATEWAY_PORT to a free port"
    )
