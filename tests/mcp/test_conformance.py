"""The official MCP conformance suite's scenarios of the tasks extension
(`@modelcontextprotocol/conformance`, pinned in conformance/package-lock.json with the Node 22 it
runs on; `make install` installs both), run against the demo's MCP server stack with the tools
the suite calls (`tests/mcp/conformance_server.py`): every check of every scenario passes, but
for the one scenario the suite itself skips."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mcp import conformance
from tests.mcp.runs import mcp_url
from tests.rigs import ROOT, free_port, python_server
from tests.tiers import SUBPROCESS, needs

SCENARIOS = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
]
# The scenarios the suite skips itself, and how its skip begins: the only checks not passed that
# are allowed.
SKIPPED_BY_THE_SUITE = {
    "tasks-status-notifications": (
        "Skipped: SEP-2663 delivers notifications/tasks via the SEP-2575 subscriptions/listen "
        "stream"
    ),
}
# A check with any other status (FAILURE, WARNING, SKIPPED) does not pass.
PASSED = {"SUCCESS", "INFO"}


@pytest.fixture(scope="module")
@needs(SUBPROCESS)
def conformance_url() -> Iterator[str]:
    """The streamable HTTP endpoint of `tests/mcp/conformance_server.py`, on a free port."""
    port = free_port()
    with python_server(["-m", "tests.mcp.conformance_server", "--port", str(port)], port):
        yield mcp_url(port)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_demo_server_passes_the_conformance_suites_tasks_scenario(
    scenario: str, conformance_suite: Path, conformance_url: str, tmp_path: Path
) -> None:
    arguments: list[str | Path] = ["server", "--url", conformance_url, "--scenario", scenario]
    ran = conformance.run(conformance_suite, arguments, tmp_path / "results", ROOT / "conformance")
    checks = ran.checks
    # The suite exits 1 when a check failed; its checks say which.
    if ran.exit_code != 0:
        assert any(check.get("status") == "FAILURE" for check in checks), ran.output

    if scenario in SKIPPED_BY_THE_SUITE:
        [check] = checks
        assert check["status"] == "SKIPPED" and check["id"] == scenario, check
        assert str(check.get("errorMessage", "")).startswith(SKIPPED_BY_THE_SUITE[scenario])
        return
    not_passed = conformance.not_passed(checks, PASSED)
    assert not not_passed, (
        f"{scenario}: {len(not_passed)} of {len(checks)} checks not passed:\n"
        + ("\n".join(not_passed))
    )
    assert any(check["status"] == "SUCCESS" for check in checks), checks


@pytest.mark.subprocess
def test_the_scenarios_run_are_every_tasks_scenario_the_suite_has(conformance_suite: Path) -> None:
    listed = conformance.listed(conformance_suite, "server")
    assert [name for name in listed if name.startswith("tasks-")] == SCENARIOS, listed
