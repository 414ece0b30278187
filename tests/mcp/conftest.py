"""The MCP test servers, started once for the package's tests on free ports (`reports_url`, in
tests/conftest.py, is shared with the workflows' question tests); and, for the tests that
restart one, one of the test's own whose tasks live in a store of their own process; and the
MCP conformance suite the conformance tests run."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from examples.tasks_store import REDELIVERY_TIMEOUT
from tests.mcp import conformance
from tests.mcp.runs import ReportsProcess, mcp_url, reports_run_on_a_process
from tests.rigs import ServerProcess, free_port, python_server
from tests.tiers import SUBPROCESS, needs


def _serving(module: str) -> Iterator[str]:
    """The streamable HTTP endpoint of the MCP server `module` runs, on a free port."""
    port = free_port()
    with python_server(["-m", module, str(port)], port):
        yield mcp_url(port)


@pytest.fixture(scope="session")
def conformance_suite() -> Path:
    """The conformance suite's entry point, once the pinned suite and Node are found where
    `make install` puts them: a missing one fails the test (it is installed, not optional)."""
    return conformance.entry()


@pytest.fixture(scope="session")
@needs(SUBPROCESS)
def plain_url() -> Iterator[str]:
    """The streamable HTTP endpoint of `tests/mcp/plain_server.py` (annotates nothing)."""
    yield from _serving("tests.mcp.plain_server")


@pytest.fixture(scope="session")
@needs(SUBPROCESS)
async def tasks_store(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """The URL of a Redis-protocol store running in its own process (database 0)."""
    port = free_port()
    log = tmp_path_factory.mktemp("tasks_store") / "store.log"
    store = ServerProcess(["-m", "examples.tasks_store", str(port)], port, log)
    await store.start()
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        await store.stop()


@pytest.fixture
@needs(SUBPROCESS)
async def restartable_reports(tasks_store: str, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    """`tests/mcp/reports_server.py` on a free port, running, its tasks in `tasks_store` under
    a queue of the test's own (servers that share a queue take each other's tasks): a test can
    kill it and start it again, and finds its tasks there."""
    port = free_port()
    env = {
        **os.environ,
        "REPORTS_MCP_TASKS_URL": tasks_store,
        "FASTMCP_DOCKET_NAME": f"reports-{uuid.uuid4().hex[:12]}",
        "FASTMCP_DOCKET_REDELIVERY_TIMEOUT": REDELIVERY_TIMEOUT,
    }
    args = ["-m", "tests.mcp.reports_server", str(port)]
    server = ServerProcess(args, port, tmp_path / "reports_server.log", env)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def reports_process(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, reports_url: str
) -> ReportsProcess:
    """Runs of a model granted the MCP test server's tools, each on a worker process of its own
    (`reports_run_on_a_process`): `async with reports_process(model, task) as run`."""
    return functools.partial(reports_run_on_a_process, dev_env, task_queue, tmp_path, reports_url)
