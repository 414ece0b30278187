"""worker.py at start: an app that cannot be served stops the worker before it connects, with
exit status 1 and one line on stderr saying what to fix."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
# The worker must stop before it connects; were it to get that far, port 1 refuses.
UNREACHABLE = "127.0.0.1:1"
CALLBACK_EXPORT = "tests.waitstate.apps_for_tests.callback_export:app"
UNDESCRIBED = "tests.waitstate.apps_for_tests.undescribed:app"


def start_worker(
    *args: str, without: tuple[str, ...] = (), **extra: str
) -> subprocess.CompletedProcess[str]:
    """Run `python worker.py ARGS` from the checkout, and wait at most 60 s for it to end."""
    env = dict(os.environ, TEMPORAL_ADDRESS=UNREACHABLE, **extra)
    for name in ("WAITSTATE_APPS", *without):  # only the apps the test names
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "worker.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# A line of the worker's log (logging's format in worker.py), not a message of its own.
_LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|WARNING) ")


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def test_app_that_does_not_import_stops_the_worker_with_one_line() -> None:
    done = start_worker("--app", "no.such.module:app")

    assert done.returncode == 1, done.stderr
    assert last_line(done.stderr).startswith("worker: app 'no.such.module:app' does not import"), (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_callback_tool_without_token_keys_stops_the_worker_naming_them() -> None:
    done = start_worker(
        "--app", CALLBACK_EXPORT, without=("WAITSTATE_TOKEN_KEYS", "WAITSTATE_TOKEN_SIGNING_KEY")
    )

    assert done.returncode == 1, done.stderr
    line = last_line(done.stderr)
    assert line.startswith(f"worker: tool 'start_export' (app {CALLBACK_EXPORT})"), done.stderr
    assert "WAITSTATE_TOKEN_KEYS" in line
    assert "Traceback" not in done.stderr


def test_a_malformed_blob_url_stops_the_worker_with_one_line() -> None:
    done = start_worker(WAITSTATE_BLOB_URL="https://bucket/prefix")

    assert done.returncode == 1, done.stderr
    line = last_line(done.stderr)
    assert line.startswith("worker: WAITSTATE_BLOB_URL 'https://bucket/prefix' is not an s3://")
    assert "Traceback" not in done.stderr


def test_a_tool_without_a_description_stops_the_worker_naming_it() -> None:
    done = start_worker("--app", UNDESCRIBED)

    assert done.returncode == 1, done.stderr
    assert last_line(done.stderr) == (
        f"worker: app {UNDESCRIBED!r} does not import: TypeError: tool "
        "tests.waitstate.apps_for_tests.undescribed.ping has no description, and the model "
        "would see only its name: give the function a docstring that says what it does, or "
        "@tool(description=...)"
    )
    assert "serving" not in done.stderr and "Traceback" not in done.stderr


def test_temporal_out_of_reach_stops_the_worker_with_one_line() -> None:
    done = start_worker(WAITSTATE_TOKEN_KEYS="k1:" + "k" * 40)

    assert done.returncode == 1, done.stderr
    # Then why, in the SDK's words (its own).
    ours = f"worker: cannot reach Temporal at {UNREACHABLE}: "
    assert last_line(done.stderr).startswith(ours), done.stderr
    assert len(last_line(done.stderr)) > len(ours), done.stderr
    assert "Traceback" not in done.stderr
    # Besides its log lines (what it serves), that one line is all it says.
    said = [line for line in done.stderr.splitlines() if not _LOG_LINE.match(line)]
    assert said == [last_line(done.stderr)], done.stderr


def test_a_taken_metrics_port_stops_the_worker_with_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = start_worker(WAITSTATE_TOKEN_KEYS="k1:" + "k" * 40, WAITSTATE_WORKER_METRICS=address)

    assert done.returncode == 1, done.stderr
    assert last_line(done.stderr).startswith(f"worker: WAITSTATE_WORKER_METRICS {address}: "), (
        done.stderr
    )
    assert "Traceback" not in done.stderr
