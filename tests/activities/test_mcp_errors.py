"""What the model and the operator read when an MCP call breaks: the errors inside the groups
the MCP SDK wraps its own in, not "unhandled errors in a TaskGroup"."""

from __future__ import annotations

from waitstate.activities.mcp import _why


def test_a_group_of_one_says_what_is_inside() -> None:
    err = ExceptionGroup("unhandled errors in a TaskGroup", [ConnectionError("peer closed")])

    assert _why(err) == "peer closed"


def test_nested_groups_say_each_error_once() -> None:
    inner = ExceptionGroup("g", [OSError("reset"), OSError("reset"), TimeoutError()])
    err = ExceptionGroup("unhandled errors in a TaskGroup", [inner, ValueError("bad frame")])

    assert _why(err) == "reset; TimeoutError; bad frame"
