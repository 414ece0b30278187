"""Workflow parts talk one way: no part hands another something to call back (a lambda, a bound
method, a function). What a part needs it reads from the state it is given, or learns from what
a call returns. Temporal's, asyncio's and Python's own calls may take callables
(`workflow.wait_condition(lambda: ...)`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PARTS = sorted((ROOT / "workflows").glob("*.py"))
assert PARTS, "no workflow modules found"
# Calls that may take a callable: the SDK's, asyncio's and the standard library's.
LIBRARIES = frozenset({"workflow", "asyncio", "contextlib", "functools"})
BUILTINS = frozenset({"max", "min", "sorted", "any", "all", "next", "filter", "map"})

Function = ast.FunctionDef | ast.AsyncFunctionDef


class _Parts:
    """The classes of the workflow modules: their methods, and the parts their `self` holds."""

    def __init__(self, trees: list[ast.Module]) -> None:
        self.methods: dict[str, set[str]] = {}
        self.holds: dict[str, dict[str, str]] = {}  # class -> self attribute -> its class
        for tree in trees:
            for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
                self.methods[cls.name] = {
                    node.name
                    for node in cls.body
                    if isinstance(node, Function)
                    and "property" not in {ast.unparse(d) for d in node.decorator_list}
                }
                self.holds[cls.name] = _held(cls)

    def is_method(self, cls: str | None, expr: ast.Attribute) -> bool:
        """Whether `expr` is a bound method of `self` (in `cls`) or of a part `self` holds."""
        if isinstance(expr.value, ast.Name) and expr.value.id == "self":
            return cls is not None and expr.attr in self.methods.get(cls, set())
        value = expr.value
        if (
            cls is not None
            and isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id == "self"
        ):
            held = self.holds.get(cls, {}).get(value.attr)
            return held is not None and expr.attr in self.methods.get(held, set())
        return False


def _held(cls: ast.ClassDef) -> dict[str, str]:
    """What `__init__` keeps on `self`, by class: a parameter's annotation or a constructor."""
    init = next((n for n in cls.body if isinstance(n, Function) and n.name == "__init__"), None)
    if init is None:
        return {}
    annotations = {
        arg.arg: arg.annotation.id
        for arg in init.args.args + init.args.kwonlyargs
        if isinstance(arg.annotation, ast.Name)
    }
    held: dict[str, str] = {}
    for node in ast.walk(init):
        if not isinstance(node, ast.Assign):
            continue
        value = node.value
        kind = None
        if isinstance(value, ast.Name):
            kind = annotations.get(value.id)
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            kind = value.func.id
        for target in node.targets:
            if isinstance(target, ast.Attribute) and kind is not None:
                held[target.attr] = kind
    return held


def _callable(expr: ast.expr, parts: _Parts, cls: str | None, local: set[str]) -> bool:
    """Whether `expr` may be a callable of ours rather than a value."""
    if isinstance(expr, ast.Lambda):
        return True
    if isinstance(expr, ast.Name):
        return expr.id in local
    if isinstance(expr, ast.Attribute):
        return parts.is_method(cls, expr)
    if isinstance(expr, ast.IfExp):
        return _callable(expr.body, parts, cls, local) or _callable(expr.orelse, parts, cls, local)
    if isinstance(expr, ast.BoolOp):
        return any(_callable(value, parts, cls, local) for value in expr.values)
    if isinstance(expr, ast.Starred):
        return _callable(expr.value, parts, cls, local)
    return False


def _root(func: ast.expr) -> str | None:
    while isinstance(func, ast.Attribute | ast.Call):
        func = func.value if isinstance(func, ast.Attribute) else func.func
    return func.id if isinstance(func, ast.Name) else None


def _scopes(tree: ast.Module) -> list[tuple[str | None, Function]]:
    """Every function of `tree`, with the class it is a method of (if any)."""
    scopes: list[tuple[str | None, Function]] = []
    for node in tree.body:
        if isinstance(node, Function):
            scopes.append((None, node))
        elif isinstance(node, ast.ClassDef):
            scopes += [(node.name, n) for n in ast.walk(node) if isinstance(n, Function)]
    return scopes


def callables_passed(sources: dict[str, str]) -> set[tuple[str, str]]:
    """Every argument that hands a callable of ours to a call of ours, as (file, its text)."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    parts = _Parts(list(trees.values()))
    found: set[tuple[str, str]] = set()
    for name, tree in trees.items():
        module = {node.name for node in tree.body if isinstance(node, Function)}
        for cls, scope in _scopes(tree):
            nested = {n.name for n in ast.walk(scope) if isinstance(n, Function) and n is not scope}
            for call in (node for node in ast.walk(scope) if isinstance(node, ast.Call)):
                root = _root(call.func)
                if root in LIBRARIES or (isinstance(call.func, ast.Name) and root in BUILTINS):
                    continue
                for arg in call.args:
                    if _callable(arg, parts, cls, nested | module):
                        found.add((name, ast.get_source_segment(sources[name], arg) or ""))
                for keyword in call.keywords:
                    if _callable(keyword.value, parts, cls, nested | module):
                        text = ast.get_source_segment(sources[name], keyword.value) or ""
                        found.add((name, f"{keyword.arg}={text}"))
    return found


def test_no_part_hands_another_a_callable() -> None:
    sources = {path.name: path.read_text() for path in PARTS}

    found = callables_passed(sources)

    assert found == set(), "a part hands another a callable: return data instead"


def test_the_check_finds_lambdas_bound_methods_and_functions() -> None:
    source = """
class Board:
    def show(self) -> None: ...

    @property
    def shown(self) -> bool: ...


class Part:
    def __init__(self, state: RunState, board: Board) -> None:
        self._state = state
        self._board = board
        self._ops = Book(state)

    def checkpoint(self) -> None: ...

    async def run(self) -> None:
        def done() -> bool:
            return True

        Other(self._state, show=self._board.show)
        self._ops.call(again=lambda x: x, then=self.checkpoint if self._board.shown else None)
        self._ops.park(done, self._board.shown, self._state.checkpoint, self._state.show)
        await workflow.wait_condition(lambda: done(), timeout=None)
        asyncio.create_task(self.checkpoint())
        ended = max(ops, key=lambda op: op.expires_at)
"""

    found = callables_passed({"part.py": source})

    assert found == {
        ("part.py", "show=self._board.show"),
        ("part.py", "again=lambda x: x"),
        ("part.py", "then=self.checkpoint if self._board.shown else None"),
        ("part.py", "done"),
    }
