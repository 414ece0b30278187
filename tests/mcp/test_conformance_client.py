"""The official MCP conformance suite's client scenarios (the suite `tests/mcp/conformance.py`
pins), run against waitstate's own client: `tests/mcp/conformance_client.py` follows each
scenario's script with the calls the worker's MCP activities make, never with a client of its
own. Each scenario runs at every protocol version the suite lists it for, and no check fails.
A check the suite skips because waitstate never sends what it tests (an `initialize` on the
stateless 2026-07-28 wire, a sampling or elicitation capability) passes, and is printed.

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
from pathlib import Path

import pytest

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
# A check the suite skips saw nothing to judge; any other status (FAILURE, WARNING) fails.
PASSED = {"SUCCESS", "INFO", "SKIPPED"}
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

    not_passed = conformance.not_passed(ran.checks, PASSED)
    assert not not_passed, (
        f"{scenario} at {version}: {len(not_passed)} of {len(ran.checks)} checks failed:\n"
        + "\n".join(not_passed)
        + f"\n{ran.output}"
    )
    # The client ran to its end: one that crashed or timed out fails no check of its own.
    assert ran.exit_code == 0, ran.output
    assert any(check["status"] == "SUCCESS" for check in ran.checks), ran.checks
    for skipped in conformance.not_passed(ran.checks, PASSED - {"SKIPPED"}):
        print(f"{scenario} at {version}: {skipped}")


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
