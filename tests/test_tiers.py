"""The tiers' marks and their guard (tests/tiers.py), in a pytest session of their own: a test
that starts what its marks do not allow fails, saying what to mark; a fixture's marks reach
every test that uses it. Nothing here starts a process or a server: the guard refuses before
anything starts, and what a marked test may do is shown by the audit event alone."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.tiers import MARKS, needs

INI = """
[pytest]
addopts = -p tests.tiers -p no:cacheprovider --strict-markers
asyncio_default_fixture_loop_scope = function
markers =
    temporal: a Temporal server
    subprocess: a process of its own
    chaos: the reliability suite
"""
CONFTEST = """
import pytest

from tests.tiers import SUBPROCESS, TEMPORAL, needs


@pytest.fixture
@needs(SUBPROCESS)
def spawner() -> str:
    return "a process"


@pytest.fixture
def through_spawner(spawner: str) -> str:
    return spawner


@pytest.fixture
@needs(TEMPORAL)
def server() -> str:
    return "a server"
"""


@pytest.fixture
def session(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    return pytester


@pytest.fixture
def listening() -> Iterator[str]:
    """A loopback address where something accepts connections (it never answers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_the_guard_fails_what_is_not_marked_and_lets_the_rest_run(
    session: pytest.Pytester, listening: str, closed_port: int
) -> None:
    # One session for every case: a pytest session of its own costs seconds on a loaded machine.
    session.makepyfile(
        f"""
        import asyncio
        import subprocess
        import sys

        import pytest
        from temporalio.client import Client
        from temporalio.testing import WorkflowEnvironment

        from tests.tiers import SUBPROCESS, needs

        # A wider fixture ends in the teardown of the last test that needs it not, an unmarked
        # one here (test_unreachable): what it stops there is not that test's doing.
        @pytest.fixture(scope="module")
        @needs(SUBPROCESS)
        def module_spawner():
            yield
            sys.audit("subprocess.Popen", "true", ["true"], None, None)

        def test_spawns():
            subprocess.run(["true"], check=True)

        def test_spawns_and_hides_it():
            try:
                subprocess.run(["true"])
            except Exception:
                pass

        def test_connects():
            asyncio.run(Client.connect("{listening}"))

        def test_starts_a_server():
            asyncio.run(WorkflowEnvironment.start_time_skipping())

        # The audit events the guard hears when a process starts, without starting one.
        @pytest.mark.subprocess
        def test_marked(module_spawner, request):
            sys.audit("subprocess.Popen", "true", ["true"], None, None)

        def test_through_a_fixture(through_spawner, request):
            sys.audit("os.posix_spawn", "true", ["true"], None)
            assert request.node.get_closest_marker("subprocess") is not None

        def test_server_fixture(server, request):
            assert request.node.get_closest_marker("temporal") is not None

        def test_unreachable(request):
            assert not any(request.node.iter_markers())
            with pytest.raises(RuntimeError):
                asyncio.run(Client.connect("127.0.0.1:{closed_port}"))
        """
    )
    result = session.runpytest("-v")
    result.assert_outcomes(failed=4, passed=4)
    result.stdout.fnmatch_lines(
        [
            "*::test_spawns FAILED*",
            "*::test_spawns_and_hides_it FAILED*",
            "*::test_connects FAILED*",
            "*::test_starts_a_server FAILED*",
            "*::test_marked PASSED*",
            "*::test_through_a_fixture PASSED*",
            "*::test_server_fixture PASSED*",
            "*::test_unreachable PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*test_spawns started a process (subprocess.Popen: true) but is not marked"
            " `subprocess`*",
            "*test_spawns_and_hides_it started a process*not marked `subprocess`*",
            f"*test_connects connected to Temporal at {listening} but is not marked `temporal`*",
            "*test_starts_a_server started a Temporal server but is not marked `temporal`*",
        ],
        consecutive=False,
    )


def test_only_the_tiers_marks_can_be_declared() -> None:
    with pytest.raises(ValueError, match="not a tier mark"):
        needs("slow")
    assert {"temporal", "subprocess", "chaos"} == MARKS


def test_needs_goes_below_the_fixture_decorator() -> None:
    with pytest.raises(TypeError, match="below @pytest.fixture"):

        @needs("subprocess")
        @pytest.fixture
        def misplaced() -> None: ...
