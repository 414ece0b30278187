"""The A2A tests' server: `python -m waitstate.a2a` as a process of the test's, and a worker of
the app it serves, on the test's task queue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.a2a.receiver import LOOPBACK, PUSH_ENV
from tests.a2a.serving import APP, a2a_process
from tests.helpers import make_worker, process_env
from tests.rigs import ServerProcess
from waitstate.apps import load_apps
from waitstate.settings import Settings


@pytest.fixture
def a2a_app() -> str:
    """The app the server serves; a module overrides it to serve its own."""
    return APP


@pytest.fixture
async def served(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, a2a_app: str
) -> AsyncIterator[ServerProcess]:
    """The A2A server, and a worker of `a2a_app`, on the test's task queue."""
    env = process_env(dev_env.client, task_queue, **PUSH_ENV)
    server = a2a_process(env, tmp_path / "a2a.log", app=a2a_app)
    settings = Settings(a2a_push_networks=LOOPBACK)
    async with make_worker(
        dev_env.client, task_queue, settings=settings, apps=load_apps([a2a_app])
    ):
        await server.start()
        try:
            yield server
        finally:
            await server.stop()
