"""The official MCP conformance suite's client scenarios (the suite `tests/mcp/conformance.py`
pins), run against waitstate's own client: `tests/mcp/conformance_client.py` follows each
scenario's script with the calls the worker's MCP activities make, never with a client of its
own. Each scenario runs at every protocol version the suite lists it for, and no check fails.
A check the suite skips saw nothing to judge, so it is no pass: the checks it may skip are named
in `MAY_SKIP`, each with why waitstate never sends what it tests (an `initialize` on the
stateless 2026-07-28 wire, a sampling or elicitation capability). Any other SKIPPED check
fails, and so does one of those that passes or is no longer reported, so the list stays true.
The figures of docs/mcp.md's table (checks passed, checks skipped) are the runs' own.

`sep-2322-client-request-state` (`input_required` on a plain `tools/call`) runs the calls as a
run does: the call activity, then the operation's poll and answer activities' backend, which
answers each round and sends the call again (`tests/mcp/conformance_client.py`).

Not run, and why (`NOT_RUN`, `NOT_RUN_FAMILIES`):

- `elicitation-sep1034-client-defaults`: protocol 2025-11-25 only, where the server asks with an
  `elicitation/create` request inside its session; waitstate declares no elicitation capability
  and takes a server's questions only by `input_required` (a task's, or a plain call's rounds),
  answered durably (a person, through the run).
- `auth/*`: a server's headers come from the worker's environment; waitstate has no OAuth flow.
- `sep-2640-*`: the skills extension, which waitstate does not implement.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.docs import between, page
from tests.mcp import conformance, conformance_client

# Each scenario run, at the protocol versions the suite lists it for.
RUN = {
    "initialize": ["2025-06-18", "2025-11-25"],
    "tools_call": ["2025-06-18", "2025-11-25", "2026-07-28"],
    "sse-retry": ["2025-11-25"],
    "request-metadata": ["2026-07-28"],
    "http-standard-headers": ["2026-07-28"],
    "http-invalid-tool-headers": ["2026-07-28"],
    "http-custom-headers": ["2026-07-28"],
    "json-schema-ref-no-deref": ["2026-07-28"],
    "json-schema-2020-12-preservation": ["2025-11-25", "2026-07-28"],
    "sep-2322-client-request-state": ["2026-07-28"],
}
NOT_RUN = {
    "elicitation-sep1034-client-defaults": "2025-11-25 only: questions asked inside a session",
}
NOT_RUN_FAMILIES = {
    "auth/": "no OAuth flow",
    "sep-2640-": "the skills extension is not implemented",
}
# The checks the suite may skip, by scenario, check id and name (one id names several checks),
# and why: waitstate never sends what they judge. Any other SKIPPED check fails, as FAILURE and
# WARNING do.
MAY_SKIP: dict[tuple[str, str, str], str] = {
    (
        "request-metadata",
        "sep-2575-client-declares-sampling-capability",
        "ClientDeclaresSamplingCapability",
    ): "no sampling capability is declared: a server's sampling requests reach a run as input "
    "requests of a call or task (`input_required`), never as requests inside a session",
    (
        "request-metadata",
        "sep-2575-client-declares-elicitation-capability",
        "ClientDeclaresElicitationCapability",
    ): "no elicitation capability is declared: a server's questions reach a run as input "
    "requests, answered durably (a person, through the run), never inside a session",
    (
        "http-standard-headers",
        "sep-2243-client-includes-standard-headers",
        "ClientMcpMethodHeader_initialize",
    ): "no `initialize` is sent on the stateless 2026-07-28 wire, so no Mcp-Method header of it",
    (
        "http-standard-headers",
        "sep-2243-client-includes-standard-headers",
        "ClientMcpMethodHeader_notifications_initialized",
    ): "no `notifications/initialized` either, on the stateless 2026-07-28 wire",
}
PASSED = {"SUCCESS", "INFO"}
DOCS_TABLE = "| scenario | versions | checks passed | skipped by the suite |"
CLIENT = [sys.executable, "-m", "tests.mcp.conformance_client"]


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("scenario", "version"),
    [(scenario, version) for scenario, versions in RUN.items() for version in versions],
)
def test_waitstates_client_passes_the_conformance_suites_client_scenario(
    scenario: str, version: str, conformance_suite: Path, tmp_path: Path
) -> None:
    # The suite runs the command through a shell, from here (the repository's root).
    command = ["client", "--command", shlex.join(CLIENT), "--scenario", scenario]
    ran = conformance.run(conformance_suite, [*command, "--spec-version", version], tmp_path)

    failed, untrue = judged(scenario, ran.checks)
    assert not failed, (
        f"{scenario} at {version}: {len(failed)} of {len(ran.checks)} checks failed:\n"
        + "\n".join(failed)
        + f"\n{ran.output}"
    )
    assert not untrue, f"{scenario} at {version}: MAY_SKIP is no longer true: {untrue}"
    # The client ran to its end: one that crashed or timed out fails no check of its own.
    assert ran.exit_code == 0, ran.output
    passed = sum(check["status"] == "SUCCESS" for check in ran.checks)
    skipped = sum(check["status"] == "SKIPPED" for check in ran.checks)
    row = documented()[scenario]
    assert (row.passed, row.skipped) == (passed, skipped), (
        f"docs/mcp.md says {scenario} passes {row.passed} checks and the suite skips "
        f"{row.skipped}; at {version} it passed {passed} and skipped {skipped}"
    )
    assert passed > 0, ran.checks


def judged(scenario: str, checks: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """A scenario's checks against `MAY_SKIP`: the checks that failed (any status but SUCCESS
    and INFO, a SKIPPED one allowed by name aside), and what makes the list untrue for the
    scenario (a check it allows that passed, or that the suite did not report)."""
    allowed = {(i, name): why for (s, i, name), why in MAY_SKIP.items() if s == scenario}
    failed = conformance.not_passed(
        [c for c in checks if not (c.get("status") == "SKIPPED" and _key(c) in allowed)], PASSED
    )
    seen = {_key(c): c.get("status") for c in checks}
    untrue = [
        f"{i} {name} ({why}) is {seen[(i, name)]}, not SKIPPED: take it off MAY_SKIP"
        if (i, name) in seen
        else f"{i} {name} ({why}) was not reported: take it off MAY_SKIP"
        for (i, name), why in allowed.items()
        if seen.get((i, name)) != "SKIPPED"
    ]
    return failed, untrue


def _key(check: dict[str, Any]) -> tuple[str, str]:
    return str(check.get("id")), str(check.get("name"))


@dataclass(frozen=True)
class Row:
    """A scenario's row of docs/mcp.md's table of client scenarios."""

    versions: list[str]
    passed: int
    skipped: int


def documented() -> dict[str, Row]:
    """docs/mcp.md's table of client scenarios, by scenario: the versions, the checks passed,
    and how many the suite skips (`2: why`, or nothing)."""
    lines = between(page("docs/mcp.md"), DOCS_TABLE, "\n\n").strip().splitlines()[1:]
    rows = {}
    for line in lines:
        scenario, versions, passed, skipped = (cell.strip() for cell in line.strip("|").split("|"))
        rows[scenario.strip("`")] = Row(
            versions.split(", "), int(passed), int(skipped.split(":")[0] or 0)
        )
    return rows


def test_a_check_skipped_is_a_failure_unless_it_is_allowed_by_name() -> None:
    scenario = "http-standard-headers"
    initialize, initialized = [(i, name) for s, i, name in MAY_SKIP if s == scenario]

    def check(key: tuple[str, str], status: str) -> dict[str, Any]:
        return {"id": key[0], "name": key[1], "status": status}

    ok = check(
        ("sep-2243-client-includes-standard-headers", "ClientMcpMethodHeader_tools_call"), "SUCCESS"
    )
    both = [ok, check(initialize, "SKIPPED"), check(initialized, "SKIPPED")]
    assert judged(scenario, both) == ([], [])
    # Another check of the same id skipped: not allowed.
    other = check(
        ("sep-2243-client-includes-standard-headers", "ClientMcpMethodHeader_tools_list"), "SKIPPED"
    )
    failed, untrue = judged(scenario, [*both, other])
    assert len(failed) == 1 and failed[0].startswith(
        "SKIPPED sep-2243-client-includes-standard-headers ClientMcpMethodHeader_tools_list"
    ), failed
    assert untrue == []
    # An allowed one of another scenario is not allowed here.
    assert len(judged("tools_call", both)[0]) == 2
    # An allowed check that passes, or is gone, makes the list untrue.
    failed, untrue = judged(scenario, [ok, check(initialize, "SUCCESS")])
    assert failed == []
    assert [line.split(" (")[0] for line in untrue] == [
        "sep-2243-client-includes-standard-headers ClientMcpMethodHeader_initialize",
        "sep-2243-client-includes-standard-headers ClientMcpMethodHeader_notifications_initialized",
    ]
    assert "is SUCCESS, not SKIPPED" in untrue[0] and "was not reported" in untrue[1]


def test_the_docs_table_names_every_scenario_run_its_versions_and_its_allowed_skips() -> None:
    rows = documented()

    assert {s: r.versions for s, r in rows.items()} == RUN
    skips = {s: sum(key[0] == s for key in MAY_SKIP) for s in RUN}
    assert {s: r.skipped for s, r in rows.items()} == skips


@pytest.mark.subprocess
def test_every_client_scenario_of_the_suite_is_run_or_said_why_not(
    conformance_suite: Path,
) -> None:
    listed = conformance.listed(conformance_suite, "client")

    for scenario, versions in RUN.items():
        assert listed.get(scenario) == versions, f"{scenario}: the suite lists {listed}"
    assert set(NOT_RUN) <= set(listed), listed
    unaccounted = [
        scenario
        for scenario in listed
        if scenario not in RUN
        and scenario not in NOT_RUN
        and not scenario.startswith(tuple(NOT_RUN_FAMILIES))
    ]
    assert not unaccounted, f"new client scenarios: run them, or say why not: {unaccounted}"
    assert all(any(s.startswith(family) for s in listed) for family in NOT_RUN_FAMILIES), listed


def test_the_client_refuses_a_scenario_it_has_no_script_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(conformance_client.SCENARIO, "elicitation-sep1034-client-defaults")

    code = conformance_client.main(["conformance_client", "http://127.0.0.1:9/mcp"])

    assert code != 0
    err = capsys.readouterr().err
    assert "unknown scenario 'elicitation-sep1034-client-defaults'" in err
    assert all(scenario in err for scenario in RUN)
