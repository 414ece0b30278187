"""The MCP test server, started once for the package's tests on a free port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rigs import free_port, python_server


@pytest.fixture(scope="session")
def reports_url() -> Iterator[str]:
    """The streamable HTTP endpoint of `tests/mcp/reports_server.py`, running."""
    port = free_port()
    with python_server(["-m", "tests.mcp.reports_server", str(port)], port):
        yield f"http://127.0.0.1:{port}/mcp"
