"""Shared fixtures: real Temporal servers started once per session from the installed binaries,
a task queue of each test's own, and the local stand-in for the model providers."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests import tiers
from tests.rigs import dev_server, time_skipping_server
from tests.tiers import TEMPORAL, needs
from waitstate.testing.wire_server import WireServer

# For the tests of the tiers' guard: they run a pytest session of their own.
pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # The tiers' marks and their guard (`make test-fast`). Registered here rather than named in
    # `pytest_plugins`: this module imports it first, for `needs`.
    config.pluginmanager.register(tiers, "tiers")


@pytest.fixture(scope="session")
@needs(TEMPORAL)
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server: a 24-hour timer takes milliseconds."""
    async with time_skipping_server() as env:
        yield env


@pytest.fixture(scope="session")
@needs(TEMPORAL)
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """The real dev server (`temporal server start-dev`), in memory, on free ports."""
    async with dev_server() as env:
        yield env


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens, held (bound, not listening) for the test, so
    no other socket can take it, as a listener or as an outgoing connection's own port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@pytest.fixture
def task_queue() -> str:
    """A task queue of the test's own, so tests never take each other's tasks."""
    return f"test-{uuid.uuid4()}"


@pytest.fixture
def wire() -> Iterator[WireServer]:
    """The OpenAI and Anthropic wire protocols, served locally: a test queues the answers."""
    with WireServer() as server:
        yield server


# --- the MCP test server, for tests/mcp/ and the workflows' question tests -----------------------


@pytest.fixture(scope="session")
@needs(tiers.SUBPROCESS)
def reports_url() -> Iterator[str]:
    """The MCP test server (tests/mcp/reports_server.py) over streamable HTTP, for the session."""
    from tests.rigs import free_port, python_server  # kept with the section it serves

    port = free_port()
    with python_server(["-m", "tests.mcp.reports_server", str(port)], port):
        yield f"http://127.0.0.1:{port}/mcp"


# --- order: the longest modules first ------------------------------------------------------------

# The modules that take a minute or more (seconds summed over their tests, measured with
# `--durations=0` on one core). `make test` hands modules to its workers in collection order
# (pytest-xdist, `--dist loadfile --no-loadscope-reorder`; without the latter, xdist hands out
# the modules with the most tests first): these go first, so that none starts last while the
# other workers sit idle.
LONGEST_FIRST = (
    "tests/chaos/test_chaos_suite.py",  # 347 s
    "tests/workflows/test_cold_order.py",  # 204 s
    "tests/mcp/test_mcp_rounds.py",  # 122 s
    "tests/test_starter.py",  # 85 s
    "tests/bench/test_bench_smoke.py",  # 78 s
    "tests/workflows/test_thread_long.py",  # 75 s
    "tests/workflows/test_worker_crash.py",  # 66 s
    "tests/gateway/test_retried_doors.py",  # 74 s, measured beside other runs (load 5)
    "tests/workflows/test_exactly_once.py",  # 54 s
    "tests/test_e2e.py",  # 54 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parent.parent

    def rank(item: pytest.Item) -> int:
        where = item.path.relative_to(root).as_posix() if root in item.path.parents else ""
        return LONGEST_FIRST.index(where) if where in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order
