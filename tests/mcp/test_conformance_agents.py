"""The official MCP conformance suite's server scenarios (the suite `tests/mcp/conformance.py`
pins), run against waitstate's own MCP server (`waitstate.mcp_server`: its door, its auth, its
tools), the one `python -m waitstate.mcp_server` serves. Each scenario that applies runs at
every protocol version the suite lists it for, and every check passes but those named in
`EXCUSED`, each with the status the suite gives it and why (the suite's own fixture tools,
which this server does not have); any other check not passed fails, and so does an excused
one that passes or is no longer reported, so the list stays true. The scenarios the suite
skips itself against this server are run too, and must be skipped (`SKIPPED_BY_THE_SUITE`).
Every other scenario is named in `NOT_APPLICABLE`, with why; a scenario the suite adds fails
the test until it is run or said why not. docs/mcp.md's counts and table are the runs' own.

The suite cannot send a bearer (its server scenarios connect with headers of their own only),
so the server is served behind `WithBearer`, an ASGI wrapper of the test's that adds a caller's
`Authorization` to a request that has none: the server's own auth (`CallerKeys`), Origin guard
and body bound are all there under it, and see the suite's `Host` and `Origin` as it sent them.
The test app adds one agent, `failing_job`: the suite's name for the task-required tool its
`tasks-required-task-error` calls without the tasks extension ("only the registration-time
declaration matters"), which every agent of this server is.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.testing import WorkflowEnvironment

from examples.systems.serving import serving
from tests.docs import between, page
from tests.mcp import conformance
from tests.mcp.agents_app import APP
from tests.mcp.runs import agents_server
from tests.rigs import ROOT
from tests.tiers import SUBPROCESS, TEMPORAL, needs
from waitstate import Agent
from waitstate.apps import load_apps
from waitstate.client import WaitstateClient
from waitstate.mcp_server import http_app

SECRET = "c" * 40
# Each scenario run, at the protocol versions the suite lists it for (none: an extension's).
RUN: dict[str, list[str]] = {
    "server-initialize": ["2025-06-18", "2025-11-25"],
    "server-session-lifecycle": ["2025-03-26", "2025-06-18", "2025-11-25"],
    "server-stateless": ["2026-07-28"],
    "logging-set-level": ["2025-06-18", "2025-11-25"],
    "ping": ["2025-06-18", "2025-11-25"],
    "tools-list": ["2025-06-18", "2025-11-25", "2026-07-28"],
    "server-sse-multiple-streams": ["2025-11-25", "2026-07-28"],
    "resources-list": ["2025-06-18", "2025-11-25", "2026-07-28"],
    "sep-2164-resource-not-found": ["2026-07-28"],
    "prompts-list": ["2025-06-18", "2025-11-25", "2026-07-28"],
    "dns-rebinding-protection": ["2025-11-25", "2026-07-28"],
    "caching": ["2026-07-28"],
    "http-header-validation": ["2026-07-28"],
    "tasks-required-task-error": [],
    "input-required-result-unsupported-methods": ["2026-07-28"],
}
FIXTURE = "the suite's own fixture tool"
# The checks of a scenario run that may not pass, by scenario and check id: the status the
# suite gives each, and why.
EXCUSED: dict[tuple[str, str], tuple[str, str]] = {
    ("server-stateless", "sep-2575-server-rejects-undeclared-capability"): (
        "FAILURE",
        f"not testable: needs {FIXTURE} test_missing_capability (a tool that needs sampling)",
    ),
    ("server-stateless", "sep-2575-missing-capability-http-400"): (
        "FAILURE",
        f"not testable: needs {FIXTURE} test_missing_capability",
    ),
    ("server-stateless", "sep-2575-http-server-no-independent-requests-on-stream"): (
        "FAILURE",
        f"not testable: needs {FIXTURE} test_streaming_elicitation",
    ),
    ("server-stateless", "sep-2575-server-no-log-without-loglevel"): (
        "FAILURE",
        f"not testable: needs {FIXTURE} test_logging_tool",
    ),
    ("server-stateless", "sep-2575-server-sends-prompts-list-changed-on-subscription"): (
        "WARNING",
        "this server's prompts never change; the suite changes them with "
        f"{FIXTURE} test_trigger_prompt_change",
    ),
    ("server-stateless", "sep-2575-server-sends-tools-list-changed-on-subscription"): (
        "WARNING",
        "this server's tools never change; the suite changes them with "
        f"{FIXTURE} test_trigger_tool_change",
    ),
    ("caching", "sep-2549-resources-read-caching-hints"): (
        "SKIPPED",
        "no resources/read to judge: the server has no resource",
    ),
}
# The scenarios the suite skips itself against this server: run, and every check they report
# is skipped (but the suite's check that what was sent fits the spec's schema).
SKIPPED_BY_THE_SUITE = {
    "sep-2640-skills-directory": "the skills extension, which the server does not declare",
    "sep-2640-skills-enumeration": "the skills extension, which the server does not declare",
    "sep-2640-skills-manifest": "the skills extension, which the server does not declare",
    "tasks-status-notifications": "its harness awaits a rewrite for subscriptions/listen",
}
ALWAYS_JUDGED = "wire-schema-valid"
NO_RESOURCES = "the server has no resource (its resource list is empty)"
NO_PROMPTS = "the server has no prompt (its prompt list is empty)"
IN_SESSION = (
    "asked inside a 2025-11-25 session; the server's questions are its tasks' input_required"
)
NOT_APPLICABLE: dict[str, str] = {
    "completion-complete": "no completions: the server has no prompt or resource template",
    "json-schema-2020-12": f"{FIXTURE} json_schema_2020_12_tool",
    "elicitation-sep1034-defaults": IN_SESSION,
    "elicitation-sep1330-enums": IN_SESSION,
    "server-sse-polling": "resumable SSE streams need an event store, and the server keeps "
    f"nothing (a caller opens a stream again, and reads its tasks afresh); {FIXTURE} "
    "test_reconnection",
    "resources-read-text": NO_RESOURCES,
    "resources-read-binary": NO_RESOURCES,
    "resources-templates-read": NO_RESOURCES,
    "resources-subscribe": NO_RESOURCES,
    "resources-unsubscribe": NO_RESOURCES,
    "http-custom-header-server-validation": "no tool takes an argument in a header "
    "(x-mcp-header): an agent's argument is its task, in words",
}
# Whole families, but the scenarios of theirs run or skipped above.
NOT_APPLICABLE_FAMILIES: dict[str, str] = {
    "tools-call-": f"{FIXTURE}s (test_simple_text, test_error_handling...): an agent's tool "
    "runs only as a task, and answers with its run's result",
    "prompts-get-": NO_PROMPTS,
    "tasks-": f"{FIXTURE}s (greet, slow_compute, confirm_delete...) with arguments of their own; "
    "the demo's server runs them (tests/mcp/test_conformance.py)",
    "input-required-result-": f"{FIXTURE}s (test_input_required_result_*): the server asks "
    "nothing before a task exists (an agent's questions are its task's input_required)",
}
PASSED = {"SUCCESS", "INFO"}
DOCS_TABLE = "| scenario | versions | checks passed | checks excused |"
DOCS_COUNTS = re.compile(
    r"Of the suite's (\d+) server scenarios, (\d+) run against it and pass, the suite skips (\d+) "
    r"and (\d+) do not apply"
)


class WithBearer:
    """Adds `Authorization: Bearer <secret>` to a request that has none (the suite's)."""

    def __init__(self, app: ASGIApp, secret: str) -> None:
        self._app, self._header = app, (b"authorization", f"Bearer {secret}".encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = list(scope.get("headers") or [])
        if scope["type"] == "http" and not any(k == b"authorization" for k, _ in headers):
            scope = {**scope, "headers": [*headers, self._header]}
        await self._app(scope, receive, send)


@dataclass(frozen=True)
class Served:
    url: str
    suite: Path


@pytest.fixture(scope="module")
@needs(SUBPROCESS, TEMPORAL)
async def served(dev_env: WorkflowEnvironment, conformance_suite: Path) -> AsyncIterator[Served]:
    """waitstate's MCP server of the test app's agents (and `failing_job`), with its auth, on
    the dev server (no worker: no scenario run here starts a run that must end)."""
    apps = load_apps([APP])
    agents = {**apps.agents, "failing_job": Agent("failing_job", model="scripted:echo")}
    client = WaitstateClient(dev_env.client, task_queue="conformance-agents")
    server = agents_server(client, {"suite": SECRET}, agents)
    async with serving(WithBearer(http_app(server), SECRET)) as root:
        yield Served(f"{root}/mcp", conformance_suite)


async def _run(served: Served, scenario: str, version: str | None, out: Path) -> conformance.Ran:
    """The suite's run of `scenario` against the server (in a thread: the server answers in
    this one's event loop)."""
    arguments: list[str | Path] = ["server", "--url", served.url, "--scenario", scenario]
    if version is not None:
        arguments += ["--spec-version", version]
    return await asyncio.to_thread(
        conformance.run, served.suite, arguments, out, ROOT / "conformance"
    )


@pytest.mark.parametrize(
    ("scenario", "version"),
    [(s, v) for s, versions in RUN.items() for v in (versions or [None])],
)
async def test_waitstates_server_passes_the_conformance_suites_server_scenario(
    served: Served, scenario: str, version: str | None, tmp_path: Path
) -> None:
    ran = await _run(served, scenario, version, tmp_path)

    failed, untrue = judged(scenario, ran.checks)
    assert not failed, (
        f"{scenario} at {version}: {len(failed)} of {len(ran.checks)} checks not passed:\n"
        + "\n".join(failed)
    )
    assert not untrue, f"{scenario} at {version}: EXCUSED is no longer true: {untrue}"
    passed = sum(check["status"] in PASSED for check in ran.checks)
    row = documented()[scenario]
    at = row.versions.index(version) if version is not None else 0
    assert row.passed[at] == passed, (
        f"docs/mcp.md says {scenario} passes {row.passed[at]} checks at {version}; it passed "
        f"{passed}"
    )
    assert passed > 0, ran.checks


@pytest.mark.parametrize("scenario", sorted(SKIPPED_BY_THE_SUITE))
async def test_the_scenarios_the_suite_skips_against_waitstates_server_are_skipped(
    served: Served, scenario: str, tmp_path: Path
) -> None:
    ran = await _run(served, scenario, None, tmp_path)

    statuses = {(c["id"], c["status"]) for c in ran.checks}
    judged_anyway = {(i, s) for i, s in statuses if i == ALWAYS_JUDGED}
    assert judged_anyway <= {(ALWAYS_JUDGED, "SUCCESS")}, ran.checks
    assert {s for i, s in statuses if i != ALWAYS_JUDGED} == {"SKIPPED"}, ran.checks


def judged(scenario: str, checks: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """A scenario's checks against `EXCUSED`: those not passed (an excused one aside, with the
    status it is excused with), and what makes the list untrue (an excused check reported
    with another status, or not reported)."""
    excused = {i: status for (s, i), (status, _) in EXCUSED.items() if s == scenario}
    failed = conformance.not_passed(
        [c for c in checks if excused.get(str(c.get("id"))) != c.get("status")], PASSED
    )
    seen = {str(c.get("id")): c.get("status") for c in checks}
    untrue = [
        f"{i} is {seen.get(i, 'not reported')}, not {status}"
        for i, status in excused.items()
        if seen.get(i) != status
    ]
    return failed, untrue


@dataclass(frozen=True)
class Row:
    """A scenario's row of docs/mcp.md's table of server scenarios."""

    versions: list[str]
    passed: list[int]
    excused: int


def documented() -> dict[str, Row]:
    """docs/mcp.md's table of server scenarios run against waitstate's server, by scenario:
    the versions, the checks passed at each, and how many are excused (`2: why`, or none)."""
    text = page("docs/mcp.md")
    lines = between(text, DOCS_TABLE, "\n\n").strip().splitlines()[1:]
    rows = {}
    for line in lines:
        scenario, versions, passed, excused = (c.strip() for c in line.strip("|").split("|"))
        rows[scenario.strip("`")] = Row(
            [] if versions == "extension" else versions.split(", "),
            [int(n) for n in passed.split(", ")],
            int(excused.split(":")[0] or 0),
        )
    return rows


def test_the_docs_table_and_counts_are_the_runs() -> None:
    rows = documented()

    assert {s: r.versions for s, r in rows.items()} == RUN
    assert all(len(r.passed) == max(1, len(r.versions)) for r in rows.values()), rows
    excused = {s: sum(key[0] == s for key in EXCUSED) for s in RUN}
    assert {s: r.excused for s, r in rows.items()} == excused


@pytest.mark.subprocess
def test_every_server_scenario_of_the_suite_is_run_or_said_why_not(
    conformance_suite: Path,
) -> None:
    listed = conformance.listed(conformance_suite, "server")

    for scenario, versions in RUN.items():
        assert [v for v in listed.get(scenario, []) if v != "extension"] == versions, listed
    assert set(SKIPPED_BY_THE_SUITE) <= set(listed), listed
    assert set(NOT_APPLICABLE) <= set(listed), listed
    taken = set(RUN) | set(SKIPPED_BY_THE_SUITE)
    by_family = {
        s for s in listed if s.startswith(tuple(NOT_APPLICABLE_FAMILIES)) and s not in taken
    }
    not_applicable = set(NOT_APPLICABLE) | by_family
    assert not taken & set(NOT_APPLICABLE), taken & set(NOT_APPLICABLE)
    unaccounted = set(listed) - taken - not_applicable
    assert not unaccounted, f"new server scenarios: run them, or say why not: {unaccounted}"
    counts = DOCS_COUNTS.search(" ".join(page("docs/mcp.md").split()))
    assert counts is not None, "docs/mcp.md gives no counts of the server scenarios"
    said = tuple(int(n) for n in counts.groups())
    assert said == (len(listed), len(RUN), len(SKIPPED_BY_THE_SUITE), len(not_applicable))
