"""The test tiers, as a pytest plugin (loaded by `tests/conftest.py`).

Three marks say what a test needs beyond the process running it:

- `temporal`: a Temporal server (the dev server or the time-skipping one), in this process or
  in one the test starts;
- `subprocess`: a process of its own (a worker, the CLI, moto, an MCP server, an interpreter);
  the servers Temporal's test environment starts are `temporal`'s, not this;
- `chaos`: the reliability suite (`tests/chaos/`).

`make test-fast` runs the rest, on the machine's cores (pytest-xdist, at most four workers):
`pytest -n auto --maxprocesses 4 -m "not temporal and not subprocess and not chaos"`. In-process
HTTP servers (the demo systems, the wire server, the gateway in a thread) are no mark's concern.

Tests are marked from what they use. A fixture that starts something says so where it is
defined, with `@needs(...)` below its `@pytest.fixture`; a test gets the marks of every fixture
it uses, directly or through others (a `stack` uses `dev_env`). Tests under `tests/chaos/` are
`chaos`. A test that starts something itself, not through a fixture, carries the mark.

A guard keeps the marks true, so the tiers cannot drift apart silently: while a test runs (its
fixtures included), starting a process, starting a Temporal server, or connecting to a Temporal
address where something listens fails the test unless it has the mark. A client pointed where
nothing listens reaches no server: tests of an unreachable Temporal need no mark.
"""

from __future__ import annotations

import platform
import shlex
import socket
import sys
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.bridge.testing import EphemeralServer
from temporalio.service import ConnectConfig, ServiceClient

TEMPORAL = "temporal"
SUBPROCESS = "subprocess"
CHAOS = "chaos"
MARKS = frozenset({TEMPORAL, SUBPROCESS, CHAOS})

CHAOS_TESTS = Path(__file__).resolve().parent / "chaos"
# The audit events of starting a process (docs.python.org/3/library/audit_events.html); asyncio
# and anyio subprocesses, `os.popen` and `pty.spawn` go through them.
SPAWN_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.posix_spawn",
        "os.spawn",
        "os.exec",
        "os.fork",
        "os.forkpty",
    }
)
# How long the guard waits to learn whether anything listens where a Temporal client points.
PROBE_TIMEOUT = 1.0

F = TypeVar("F", bound=Callable[..., Any])
_NEEDS = "_waitstate_tiers"
_VIOLATIONS = pytest.StashKey[list[str]]()
_PATCHES = pytest.StashKey[pytest.MonkeyPatch]()
# The tests running now, innermost last: one, or two while a test runs a pytest session of its
# own in this process (`pytester`); None on top while a teardown ends wider fixtures.
_running: list[pytest.Item | None] = []
_audit_hook_added = False


class TierViolation(Exception):
    """A test started what its marks do not allow."""


def needs(*marks: str) -> Callable[[F], F]:
    """Declare what a fixture starts: every test that uses it, directly or through another
    fixture, gets `marks`. Goes below `@pytest.fixture`."""
    unknown = set(marks) - MARKS
    if unknown:
        raise ValueError(f"not a tier mark: {sorted(unknown)}; the marks are {sorted(MARKS)}")

    def declare(fixture: F) -> F:
        if hasattr(fixture, "_fixture_function"):  # pytest's wrapper: its function is used
            raise TypeError(f"@needs goes below @pytest.fixture, on {fixture.__name__}")
        setattr(fixture, _NEEDS, frozenset(marks))
        return fixture

    return declare


def pytest_configure(config: pytest.Config) -> None:
    global _audit_hook_added
    # Libraries read the platform once a process (the OpenAI SDK's headers ask `uname -p`):
    # read here, it is no test's process.
    platform.platform()
    if not _audit_hook_added:  # an audit hook stays for the process: one serves every session
        sys.addaudithook(_audit)
        _audit_hook_added = True
    patches = pytest.MonkeyPatch()
    patches.setattr(ServiceClient, "connect", staticmethod(_guarded_connect(ServiceClient.connect)))
    for name in ("start_dev_server", "start_test_server"):
        start = getattr(EphemeralServer, name)
        patches.setattr(EphemeralServer, name, staticmethod(_guarded_start(start)))
    config.stash[_PATCHES] = patches


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PATCHES in config.stash:
        config.stash[_PATCHES].undo()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for mark in sorted(marks_for(item)):
            item.add_marker(mark)


def marks_for(item: pytest.Item) -> set[str]:
    """The tier marks `item` gets from the fixtures it uses and from where it is."""
    marks: set[str] = set()
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        for name in info.names_closure:
            for fixture in info.name2fixturedefs.get(name, ()):
                marks |= getattr(fixture.func, _NEEDS, frozenset())
    if CHAOS_TESTS in item.path.parents:
        marks.add(CHAOS)
    return marks


@contextmanager
def _running_as(item: pytest.Item | None) -> Iterator[None]:
    """`item` is the running test (None: no test's doing) until the block ends."""
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    with _running_as(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    # A test's teardown also ends the wider fixtures no later test needs (a module's, the
    # session's), set up for marked tests before it: what they stop there is not this test's
    # doing, so the guard is lifted (a test's own fixtures started what they stop in setup).
    with _running_as(None):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # The guard raises where the test starts what it may not; this fails the test even if the
    # code under test caught that, and says why if it failed of something that followed.
    violations = item.stash.get(_VIOLATIONS, [])
    if violations:
        if report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(violations)
        else:
            report.sections.append(("tiers", "\n".join(violations)))
        violations.clear()
    return report


def _require(mark: str, what: str) -> None:
    """Refuse `what` unless the running test is marked `mark`."""
    item = _running[-1] if _running else None
    if item is None:  # collection, the session's start, a teardown: no test's doing
        return
    if item.get_closest_marker(mark) is not None:
        return
    message = (
        f"{item.nodeid} {what} but is not marked `{mark}`: mark the test, or declare the "
        f"fixture that does it with `@needs({mark.upper()})` (tests/tiers.py)"
    )
    item.stash.setdefault(_VIOLATIONS, []).append(message)
    raise TierViolation(message)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in SPAWN_EVENTS:
        _require(SUBPROCESS, f"started a process ({event}{_command(event, args)})")


def _command(event: str, args: tuple[Any, ...]) -> str:
    if event != "subprocess.Popen" or len(args) < 2:
        return ""
    command = args[1]
    words = command if isinstance(command, (list, tuple)) else [command]
    return f": {shlex.join(str(word) for word in words)[:200]}"


def _guarded_connect(
    connect: Callable[[ConnectConfig], Awaitable[ServiceClient]],
) -> Callable[[ConnectConfig], Awaitable[ServiceClient]]:
    async def guarded(config: ConnectConfig) -> ServiceClient:
        if _listens(config.target_host):
            _require(TEMPORAL, f"connected to Temporal at {config.target_host}")
        return await connect(config)

    return guarded


def _guarded_start(
    start: Callable[..., Awaitable[EphemeralServer]],
) -> Callable[..., Awaitable[EphemeralServer]]:
    async def guarded(*args: Any, **kwargs: Any) -> EphemeralServer:
        _require(TEMPORAL, "started a Temporal server")
        return await start(*args, **kwargs)

    return guarded


def _listens(target: str) -> bool:
    """Whether anything accepts connections at `target` (`host:port`); True if it cannot tell."""
    host, _, port = target.rpartition("://")[2].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT):
            return True
    except ValueError:
        return True
    except OSError:
        return False
