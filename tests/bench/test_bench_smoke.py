"""The benchmark runs end to end at a tiny size and reports every figure's rows.

Timings are not asserted (they depend on the machine); structure and sanity are.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import MARKER
from bench.figures import QUICK

pytestmark = [pytest.mark.temporal, pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_METRICS = [
    "worker CPU per run",
    "history per run",
    "sequential latency p50",
    "sequential latency p99",
    "concurrent throughput",
    "resume latency p50",
    "resume latency p99",
    "worker RSS while waiting",
    "worker CPU while waiting",
    "drain: complete all N",
    "runs completed",
    "model turns during the polled wait",
    "naive polling: model asked every poll interval",
    f"history at {QUICK.turns[-1]} turns",
    f"runs in the chain at {QUICK.turns[-1]} turns",
    "send → model call p50",
    "send → model call p95",
    f"history per message over {QUICK.messages} messages",
    "step → reader p50: stream (ours) vs polling watch (floor)",
    "step → reader p50: watch woken by the history (ours) vs polling",
    "gateway CPU per event handed to a reader",
    f"billed input, {QUICK.cache_messages} messages, anthropic (floor: uncached)",
    "model calls started per second, burst included",
    "wake after an MCP task ends, notified (floor: polling every 2 s)",
    f"{QUICK.tree_children}-child fan-out: start → the root's result",
    "worker CPU per fan-out",
    "parent history per child",
    "history of every node (parent and children) per child",
    f"cancel → every node closed, p99 of {QUICK.cancel_trials} trees",
    "model calls scheduled or started after the cancel",
    "forks under recorded, 16 at once, first start → last end",
    "forks through one evaluation (concurrency 16), start → report",
    "remote A2A agent: completion → run woken p50, push (floor: polling every 1 s)",
    "remote A2A agent: completion → run woken p95, push (floor: polling every 1 s)",
]


def _rows(markdown: str) -> dict[str, list[str]]:
    """Metric name (without its unit) -> the table row's cells."""
    rows = {}
    for line in markdown.split(MARKER, 1)[1].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) == 7 and "[" in cells[1]:
            rows[cells[1].rsplit(" [", 1)[0]] = cells
    return rows


# The quick bench takes about 100 s on a quiet machine (figures 8, 10 and 14 start dev servers of
# their own); beside the rest of the suite, on 2 cores, it has taken over 180 s.
QUICK_TIMEOUT = 400


@pytest.mark.timeout(QUICK_TIMEOUT + 60)
def test_quick_bench_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--reps", "1", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=QUICK_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    assert "cores" in text and "GB memory" in text  # the machine is reported
    rows = _rows(text)
    assert [m for m in EXPECTED_METRICS if m not in rows] == []
    for metric in ("worker CPU per run", "history per run", "resume latency p50"):
        ours, floor, ratio = rows[metric][2], rows[metric][3], rows[metric][4]
        assert ours != "–" and floor != "–" and ratio.endswith("×"), rows[metric]
        assert float(ratio.rstrip("×")) > 0
    # Every suspended run completed, on both sides; no model turn while the poll waited.
    runs = rows["runs completed"]
    assert runs[2] == runs[3] == str(QUICK.scale) and runs[6] == "met", runs
    assert rows["model turns during the polled wait"][2] == "0"
    assert float(rows["naive polling: model asked every poll interval"][2]) >= 2
    # History grows with the turns, and stays far from the 2 MB mark at this size.
    sizes = [float(rows[f"history at {t} turns"][2].replace(",", "")) for t in QUICK.turns]
    assert sizes[0] < sizes[1] < sizes[2] < 2 * 1024 * 1024
    # A conversation, on both sides: each message's model call started after its send.
    send = rows["send → model call p50"]
    assert float(send[2].replace(",", "")) > 0 and float(send[3].replace(",", "")) > 0, send
    # A run's steps reach a reader of its stream, and a polling watch, after they ended; the
    # gateway handed its readers' events out.
    stream = rows["step → reader p50: stream (ours) vs polling watch (floor)"]
    assert float(stream[2].replace(",", "")) > 0 and float(stream[3].replace(",", "")) > 0, stream
    assert float(rows["gateway CPU per event handed to a reader"][2].replace(",", "")) > 0
    # A run awaiting an MCP task went on after the task ended, notified and polled alike.
    woke = rows["wake after an MCP task ends, notified (floor: polling every 2 s)"]
    assert float(woke[2]) > 0 and float(woke[3]) > 0, woke
    # Caching bills a conversation's input for less than its whole.
    billed = rows[f"billed input, {QUICK.cache_messages} messages, anthropic (floor: uncached)"]
    assert 0 < float(billed[4].rstrip("×")) < 1, billed
    # A lead's turn started its sub-agents, and the floor its child workflows; the parent's
    # history per child is measured on both sides.
    for metric in (f"{QUICK.tree_children}-child fan-out: start → the root's result",
                   "worker CPU per fan-out", "parent history per child"):  # fmt: skip
        fan = rows[metric]
        assert float(fan[2].replace(",", "")) > 0 and float(fan[3].replace(",", "")) > 0, fan
    # A tree cancelled: its nodes closed, and no model call came after the cancel.
    closed = rows[f"cancel → every node closed, p99 of {QUICK.cancel_trials} trees"]
    assert float(closed[2]) > 0 and closed[6] == "met", closed
    assert rows["model calls scheduled or started after the cancel"][2] == "0"
    # A run that called a remote A2A agent went on after its task completed, pushed and polled.
    woken = rows["remote A2A agent: completion → run woken p50, push (floor: polling every 1 s)"]
    assert float(woken[2]) >= 0 and float(woken[3]) > 0, woken
    assert "ours/floor" in done.stdout and "met" in done.stdout  # the table went to stdout too
