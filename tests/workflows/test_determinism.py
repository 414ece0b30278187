"""The workflow's modules stay deterministic without the sandbox's help.

The worker loads `workflows/` (`waitstate.workflows`) once, passed through the sandbox (worker.py), so the sandbox no
longer stops a workflow module from reading the clock, drawing random numbers or touching
the outside world. This test does, from the source: time, randomness and waiting come from
`workflow.*` only, and no module keeps state of its own between runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
MODULES = sorted(WORKFLOWS.glob("*.py"))
assert MODULES, f"no workflow modules in {WORKFLOWS}"
# What a workflow may not import: the clock, randomness, threads, processes, files, network.
FORBIDDEN_IMPORTS = {
    "random", "secrets", "time", "uuid", "threading", "multiprocessing", "subprocess",
    "os", "socket", "signal", "tempfile", "shutil", "pathlib", "urllib", "http",
    "httpx", "requests", "openai", "anthropic", "waitstate.activities", "waitstate.providers",
    "waitstate.blobs", "waitstate.gateway", "waitstate.client", "waitstate.settings",
}  # fmt: skip
# Attribute calls that read the clock or the environment, whatever module they come from.
FORBIDDEN_CALLS = {"now", "utcnow", "today", "time", "monotonic", "getenv", "urandom", "uuid4"}
ALLOWED_CALL_OWNERS = {"workflow"}  # workflow.now(), workflow.uuid4(): deterministic
FORBIDDEN_BUILTINS = {"open", "input", "exec", "eval"}


def _imports(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {_package(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(_package(node.module))
    return names


def _package(module: str) -> str:
    # `os.path` -> `os`; within the project's package, its subpackage: `waitstate.blobs.store`
    # -> `waitstate.blobs`.
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "waitstate" else parts[0]


def _forbidden_calls(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS:
            found.append(f"{func.id}() at line {node.lineno}")
        if isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_CALLS:
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if owner not in ALLOWED_CALL_OWNERS:
                found.append(f"{ast.unparse(func)}() at line {node.lineno}")
    return found


def _module_state(tree: ast.Module) -> list[str]:
    """Module-level names bound to something mutable: state shared by every run."""
    mutable = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
    found = []
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, mutable):
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_a_workflow_module_reads_time_and_chance_from_workflow_only(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))

    assert not _imports(tree) & FORBIDDEN_IMPORTS
    assert not _forbidden_calls(tree)
    assert not _module_state(tree)


def test_the_guard_catches_what_it_is_for() -> None:
    tree = ast.parse(
        "import random\nfrom datetime import datetime\nSEEN = {}\n"
        "def f():\n    return datetime.now(), open('x'), workflow.now()\n"
    )

    assert _imports(tree) & FORBIDDEN_IMPORTS == {"random"}
    assert _forbidden_calls(tree) == ["datetime.now() at line 5", "open() at line 5"]
    assert _module_state(tree) == ["line 3: SEEN = {}"]
