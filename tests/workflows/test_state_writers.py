"""Each piece of a run's state has one writer, named in `RunState`'s docstring: no part of the
workflow changes a field another part owns (it asks the owner). Read from the source: every
assignment to, deletion from or mutating call on `state.<field>` or `self._state.<field>` in
`workflows/`, attributed to the class it is in (or to the module, for the ledger's functions).
"""

from __future__ import annotations

import ast
import inspect
from collections import defaultdict
from pathlib import Path

from waitstate.schemas import RunState

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
MUTATING = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault"}


def named_writers() -> dict[str, str]:
    """The writer of each field, as `RunState`'s docstring names it."""
    doc = inspect.getdoc(RunState) or ""
    section = doc.split("Writers:\n", 1)[1]
    writers = {}
    for line in section.splitlines():
        if ":" not in line:
            break
        fields, writer = line.strip().split(": ")
        writers |= {field: writer for field in fields.split(", ")}
    return writers


def _field(node: ast.expr) -> str | None:
    """The RunState field `node` changes: `state.<f>...` or `self._state.<f>...`."""
    chain: list[str] = []
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute):
            chain.append(node.attr)
        node = node.value
    chain.reverse()
    if isinstance(node, ast.Name) and node.id == "state" and chain:
        return chain[0]
    if isinstance(node, ast.Name) and node.id == "self" and chain[:1] == ["_state"]:
        return chain[1] if len(chain) > 1 else None
    return None


def writers_in(source: str, module: str) -> dict[str, set[str]]:
    """The fields `source` changes, each with who changes it (a class, else the module)."""
    found: dict[str, set[str]] = defaultdict(set)

    def visit(node: ast.AST, writer: str) -> None:
        for child in ast.iter_child_nodes(node):
            owner = child.name if isinstance(child, ast.ClassDef) else writer
            targets: list[ast.expr] = []
            if isinstance(child, ast.Assign):
                targets = [t for tt in child.targets for t in getattr(tt, "elts", [tt])]
            elif isinstance(child, ast.AugAssign | ast.AnnAssign):
                targets = [child.target]
            elif isinstance(child, ast.Delete):
                targets = child.targets
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr in MUTATING
            ):
                targets = [child.func.value]
            for target in targets:
                if (field := _field(target)) is not None:
                    found[field].add(owner)
            visit(child, owner)

    visit(ast.parse(source), module)
    return found


def test_each_field_the_run_changes_has_the_one_writer_its_class_names() -> None:
    named = named_writers()
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(WORKFLOWS.glob("*.py")):
        for field, writers in writers_in(path.read_text(), path.stem).items():
            found[field] |= writers

    assert set(named) <= set(RunState.model_fields)
    assert {field: sorted(w) for field, w in found.items() if w != {named.get(field)}} == {}
    # Every writer named writes what it is named for (the list says nothing stale).
    assert set(named) == set(found)


def test_the_plan_is_resolved_by_the_opening_alone() -> None:
    # Parts read the run's input through its plan; the opening is the one that resolves it
    # (its agent's definition, its MCP tools), and nothing sets a field of an input in place.
    resolving = {
        path.stem
        for path in WORKFLOWS.glob("*.py")
        if ".resolve(" in path.read_text() and path.stem != "plan"
    }
    in_place = [
        path.stem
        for path in WORKFLOWS.glob("*.py")
        if "setattr(self._input" in path.read_text() or "self._input." in _assigned(path)
    ]

    assert resolving == {"opening"}
    assert in_place == []


def _assigned(path: Path) -> str:
    """The targets of `path`'s assignments, as source."""
    tree = ast.parse(path.read_text())
    return "\n".join(
        ast.unparse(target)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
    )


def test_a_second_writer_is_found() -> None:
    source = (
        "class Opening:\n"
        "    def open(self):\n"
        "        self._state.steps.append(1)\n"
        "        state = self._state\n"
        "        del state.operations['x']\n"
        "        self._state.usage += 1\n"
    )

    assert writers_in(source, "opening") == {
        "steps": {"Opening"},
        "operations": {"Opening"},
        "usage": {"Opening"},
    }
