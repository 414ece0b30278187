"""The MCP test server, started once for the package's tests on a free port."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rigs import free_port, port_open

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def reports_url() -> Iterator[str]:
    """The streamable HTTP endpoint of `tests/mcp/reports_server.py`, running."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp.reports_server", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open(port):
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the MCP test server did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
