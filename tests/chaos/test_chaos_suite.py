"""The reliability suite in its CI size: a real stack, every fault class, and the invariants
after every run; its workers keep their blobs in a bucket of an S3-protocol server (moto's, a
process of the stack), where `make chaos` uses a directory. Slow (about five minutes on two
cores, half of it the blob store outage of issue 22, which must outlast the model's retry
budget of about two minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.exactly_once import ROWS
from chaos.invariants import INVARIANTS
from chaos.mcp_doors import ROWS as MCP_DOORS
from chaos.model_kills import ROWS as MODEL_KILLS
from chaos.outsiders import ROWS as ISSUE_22_ROWS
from chaos.thread_doors import ROW as THREAD_DOORS
from chaos.tree_rows import ROW_BUDGET, ROW_CANCEL, ROW_KILLS, ROW_RESTART, ROW_WAITS

pytestmark = [pytest.mark.temporal, pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parents[2]
# Generous: the suite takes about five minutes alone (its blob store outage alone lasts two and
# a half, and the runs' backoff after it up to one more), more beside other work on two cores;
# a hung stack must still fail the test.
SUITE_TIMEOUT = 900
FAULT_CLASSES = ("1 ", "2 ", "3 ", "4 ", "5 ", "6 ")


@pytest.mark.timeout(SUITE_TIMEOUT + 60)
def test_the_ci_suite_passes_with_a_row_for_every_fault_class() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "--size", "ci", "--blobs", "s3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT,
    )
    output = done.stdout + done.stderr
    rows = {
        line.split(" | ")[0].strip(): line for line in done.stdout.splitlines() if " | " in line
    }

    assert done.returncode == 0, output
    missing = [c for c in FAULT_CLASSES if not any(row.startswith(c) for row in rows)]
    assert not missing, f"no row for fault classes {missing}:\n{output}"
    # Issue 11's classes (progress, expiry per mode, continue-as-new, key rotation, decisions
    # racing the policy), issue 22's (crafted schemas, a gateway outage that loses webhooks, a
    # blob store outage, questions during a wait and during a checkpoint), issue 39's (a
    # thread's doors, worker kills during model calls, MCP calls sent again with their keys),
    # the agent trees' kills, restarts, cancels and budget, and every invariant, each with
    # something counted.
    classes = (
        *ROWS,
        *ISSUE_22_ROWS,
        THREAD_DOORS,
        *MODEL_KILLS,
        *MCP_DOORS,
        ROW_KILLS,
        ROW_RESTART,
        ROW_CANCEL,
        ROW_WAITS,
        ROW_BUDGET,
    )
    absent = [name for name in (*classes, *INVARIANTS) if name not in rows]
    assert not absent, f"no row for {absent}:\n{output}"
    counted = classes
    uncounted = [name for name in counted if rows[name].split(" | ")[1].strip() == "0"]
    assert not uncounted, f"rows that counted nothing: {uncounted}:\n{output}"
    assert "passed" in done.stdout.splitlines()[-1], output
    stored = [line for line in done.stdout.splitlines() if line.startswith("blobs stored: ")]
    assert stored and float(stored[0].split(": ")[1]) > 0, output  # the bucket was used
