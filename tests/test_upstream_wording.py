"""A guard (issue 38): no test asserts another library's wording, which changes under a fresh
install (anthropic 2.17 reworded "Connection error." and "Request timed out", and three tests
failed that asserted those words rather than ours).

A test asserts what we promise: the field's path, the tool's name, our prefix, the error's
kind (retryable or not, its type or code, the provider, the URL we add), the HTTP status and
our error code. Where our message passes a library's reason on, the test asks the library for
it (`tests/upstream.py`). This guard reads every string a test module's code holds (docstrings
and comments are prose, and are not read) and fails naming each one that holds a phrase below,
as `file:line`. It reads `tests/` only: the wire stand-ins in `waitstate/testing/` play the
providers, and say what they say.

Phrases that are also ours are not listed: "does not match" and "is not one of" (elicitation's
RE2 pattern and choices, the output correction), "is too short" (our key checks), "Connection
lost." (what our adapters say of a stream broken off).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# Each library's phrases, as it words them (matched as they are, case and all).
UPSTREAM: dict[str, tuple[str, ...]] = {
    "pydantic": (
        "Field required",
        "Input should be",
        "Extra inputs are not permitted",
        "String should",
        "List should",
        "Value error, ",
        "Invalid JSON",
        "validation error for",
    ),
    "jsonschema": (
        "is a required property",
        "is not of type",
        "Additional properties",
        "was unexpected",
        "should be non-empty",
        "is less than",
        "is greater than",
        "is not valid under any of the given schemas",
    ),
    "openai, anthropic, httpx, h11": (
        "Connection error.",
        "Request timed out",
        "timed out after",
        "All connection attempts failed",
        "Connect call failed",
        "incomplete chunked read",
        "peer closed connection",
        "Server disconnected",
    ),
    "temporalio and its Core": (
        "already completed",
        "aborted by closing workflow",
        "update was aborted",
        "workflow not found",
        "no rows in result set",
        "Failure exceeds size limit",
        "Workflow Update failed because",
        "Nondeterminism",
        "nondeterminism",
        "TMPRL1100",
        "Activity id of scheduled event",
        "Timer fired event did not have",
        "machine does not handle",
        "Non-deprecated patch marker",
        "Completing activity as failed",
        "client connect",
    ),
    "fastapi, starlette, uvicorn, the mcp SDK, fastmcp": (
        "Not Found",
        "Method Not Allowed",
        "Unprocessable Entity",
        "Internal Server Error",
        "There was an error parsing the body",
        "Method not found",
        "Session not found",
        "Invalid request parameters",
        "Unknown tool",
        "Error executing tool",
        "Input validation error",
        "Uvicorn running on",
        "Application startup complete",
    ),
    "Python's json": ("Expecting value", "Extra data: line"),
}


def upstream_wording(path: Path) -> Iterator[tuple[int, str, str]]:
    """Each `(line, library, phrase)` of the strings in the code of the module at `path`."""
    tree = ast.parse(path.read_text(), str(path))
    prose = {id(node) for node in _docstrings(tree)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if id(node) in prose:
            continue
        for library, phrases in UPSTREAM.items():
            for phrase in phrases:
                at = node.value.find(phrase)
                if at >= 0:
                    yield node.lineno + node.value.count("\n", 0, at), library, phrase


def _docstrings(tree: ast.Module) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            yield first.value


def test_no_test_asserts_another_librarys_wording() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {library}'s {phrase!r}"
        for path in sorted(TESTS.rglob("*.py"))
        if path != Path(__file__).resolve()
        for line, library, phrase in upstream_wording(path)
    ]

    assert not found, "tests assert another library's wording:\n" + "\n".join(found)


def test_the_guard_finds_a_phrase_in_code_and_not_in_prose(tmp_path: Path) -> None:
    module = tmp_path / "test_planted.py"
    module.write_text(
        '"""Pydantic says Field required of a missing field."""\n'
        "\n"
        "\n"
        "def test_planted(error: str) -> None:\n"
        '    """A docstring: Connection error."""\n'
        "    # A comment: Request timed out\n"
        "    assert error == (\n"
        '        "calculate: expression: "\n'
        '        "Field required"\n'
        "    )\n"
        '    assert error.endswith("""\n'
        'aborted by closing workflow""")\n'
    )

    assert sorted(upstream_wording(module)) == [
        (8, "pydantic", "Field required"),
        (12, "temporalio and its Core", "aborted by closing workflow"),
    ]
