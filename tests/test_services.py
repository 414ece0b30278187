"""`make up` (scripts/services.py) when a service cannot start: one line saying why, from this
start's output, never an earlier start's."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tests.rigs import Services

pytestmark = [pytest.mark.temporal, pytest.mark.subprocess]

UNDESCRIBED = "tests.waitstate.apps_for_tests.undescribed:app"
# What an earlier worker left in the log: `up` must not show it as this start's error.
OLD_CRASH = 'Traceback (most recent call last):\n  File "worker.py"\nRuntimeError: an old crash\n'


async def _up_failing(services: Services) -> subprocess.CompletedProcess[str]:
    """`make up`, which must fail, and then `make down`, which must clean up after it."""
    try:
        up = await services.services("up")
    finally:
        down = await services.services("down")
    assert up.returncode == 1, up.stderr
    assert down.returncode == 0, down.stderr
    return up


async def test_up_with_an_app_that_cannot_be_served_says_why_in_one_line(tmp_path: Path) -> None:
    services = Services(tmp_path, {"WAITSTATE_APPS": UNDESCRIBED})
    (tmp_path / "worker.log").write_text(OLD_CRASH)
    up = await _up_failing(services)

    assert up.stderr == (
        f"error: worker exited at start: worker: app {UNDESCRIBED!r} does not import: "
        "TypeError: tool tests.waitstate.apps_for_tests.undescribed.ping has no description, "
        "and the model would see only its name: give the function a docstring that says what "
        f"it does, or @tool(description=...) (see {tmp_path / 'worker.log'})\n"
    )
    assert "server started" in up.stdout and "worker started" not in up.stdout


async def test_up_with_the_demo_systems_port_taken_names_it_and_its_variable(
    tmp_path: Path,
) -> None:
    services = Services(tmp_path)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", services.systems_port))
        taken.listen()
        up = await _up_failing(services)

    assert up.stderr == (
        f"error: systems exited at start: demo systems: cannot listen on "
        f"127.0.0.1:{services.systems_port}: another process listens there; set "
        "DEMO_SYSTEMS_URL to a free port (`make up` starts them on its port) "
        f"(see {tmp_path / 'systems.log'})\n"
    )
