"""The client's errors are said in one place per door (docs/development.md, "Layout"), read
from the source with `ast`: what a refusal of the client's means in HTTP is decided in
`waitstate/gateway/delivery.py` (`refusal`), in JSON-RPC in `waitstate/mcp_server/errors.py`
(`refusal`), in A2A in `waitstate/a2a/errors.py` (`refusal`), and the CLI's exit status in
`waitstate/cli/main.py`.

What counts: an `except` clause or an `isinstance` test naming one of the client's refusals
(the errors a door must say to its caller, each its own way) in a module of that door other
than its one place. A door may still catch the client's errors broadly (`ClientError`) or
read ones (`RunNotFound`, `NotAnswered`) to decide what to do next; it says none of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from tests.helpers import package_files
from waitstate.client import (
    AnswerRefused,
    MessageRefused,
    NotAnswered,
    RunNotFound,
    StartFailed,
    ThreadClosed,
    Unreachable,
)
from waitstate.mcp_server.errors import refusal
from waitstate.schemas.errors import QUESTION_INVALID_ANSWER

ROOT = Path(__file__).resolve().parent.parent

# The client's errors that are a door's to say to its caller.
REFUSALS = frozenset(
    {
        "UpdateRefused",
        "DecisionRefused",
        "AnswerRefused",
        "CompletionRefused",
        "MessageRefused",
        "ThreadClosed",
        "OutcomeUnknown",
        "AlreadyApplied",
        "UpdateNotFound",
        "RunUnavailable",
        "StartFailed",
    }
)
# Each door, and its one place.
DOORS = {
    "waitstate/gateway/": "waitstate/gateway/delivery.py",
    "waitstate/mcp_server/": "waitstate/mcp_server/errors.py",
    "waitstate/a2a/": "waitstate/a2a/errors.py",
}
# Where a door acts on a refusal without saying it, each with its reason: `tasks/update`
# ignores a decision or an answer that came late (the extension asks it to), and asks the one
# place whether an answer's refusal is the caller's to correct.
ACTS_ON = frozenset({("waitstate/mcp_server/tasks.py", "DecisionRefused", "AnswerRefused")})


def _named(node: ast.expr | None) -> set[str]:
    """The class names an `except` clause or an `isinstance` test names."""
    if node is None:
        return set()
    if isinstance(node, ast.Tuple):
        return {name for element in node.elts for name in _named(element)}
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def refusals_said(path: str, source: str) -> list[str]:
    """The places in `source` that name one of the client's refusals, as `path:line Name`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.ExceptHandler):
            names = _named(node.type)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            names = _named(node.args[1])
        else:
            continue
        found += [(node.lineno, name) for name in sorted(names & REFUSALS)]
    return [f"{path}:{line} {name}" for line, name in sorted(found)]


def doors_saying_refusals(root: Path) -> list[str]:
    """Every place outside a door's one place where the door says a client's refusal."""
    found: list[str] = []
    for file in package_files(root):
        path = file.relative_to(root).as_posix()
        door = next((d for d in DOORS if path.startswith(d)), None)
        if door is None or path == DOORS[door]:
            continue
        allowed = {name for p, *names in ACTS_ON if p == path for name in names}
        found += [
            hit
            for hit in refusals_said(path, file.read_text())
            if hit.rsplit(" ", 1)[1] not in allowed
        ]
    return found


def test_each_door_says_the_clients_refusals_in_one_place() -> None:
    assert doors_saying_refusals(ROOT) == []


def test_the_one_places_are_where_they_are_said() -> None:
    # The check reads the files it means to: the one places name the refusals themselves.
    for place in DOORS.values():
        assert refusals_said(place, (ROOT / place).read_text()), place


def test_a_planted_second_mapping_is_found() -> None:
    source = """
async def send(client):
    try:
        await client.decide("r", None)
    except (DecisionRefused, RunNotFound):
        return 409
    except ClientError as err:
        if isinstance(err, errors.OutcomeUnknown):
            return 504
"""
    assert refusals_said("waitstate/gateway/planted.py", source) == [
        "waitstate/gateway/planted.py:5 DecisionRefused",
        "waitstate/gateway/planted.py:8 OutcomeUnknown",
    ]


@pytest.mark.parametrize(
    ("error", "code", "says"),
    [
        (RunNotFound("r"), INVALID_PARAMS, "Task t-1 not found"),
        (ThreadClosed("r"), INVALID_PARAMS, "is closed"),
        (MessageRefused("r", "busy", "thread_busy"), INVALID_PARAMS, "the thread refused it: busy"),
        (AnswerRefused("r", "not a number", QUESTION_INVALID_ANSWER), INVALID_PARAMS, "number"),
        (AnswerRefused("r", "already answered", "QuestionClosed"), INTERNAL_ERROR, "answered"),
        (StartFailed("r", "no such model"), INTERNAL_ERROR, "no such model"),
        (NotAnswered("r", "no worker"), INTERNAL_ERROR, "is a worker running?"),
        (Unreachable("Temporal is down"), INTERNAL_ERROR, "Temporal is down"),
    ],
)
def test_the_mcp_server_says_each_error_as_the_caller_can_act_on_it(
    error: Exception, code: int, says: str
) -> None:
    said = refusal(error, task_id="t-1")  # type: ignore[arg-type]

    assert said.error.code == code
    assert says in said.error.message
    assert "\n" not in said.error.message
