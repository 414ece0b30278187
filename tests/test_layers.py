"""The package's layers (docs/development.md, "Layout"), read from the source with `ast`:

- no import cycle among waitstate's modules, counting the imports that run when a module is
  imported (its module-level ones), nor counting the imports inside functions as well;
- the client imports nothing of the adapters over it (the gateway, the MCP server, the CLI);
- the gateway and the MCP server import nothing of the CLI;
- auth (tokens, operator keys) imports nothing of the gateway, the client, the MCP server or the
  CLI, which all use it;
- no import inside a function but an optional one (a provider's SDK, the mcp SDK's sessions),
  listed and marked `# optional: ...`.

A layer's imports are all of them: module-level, inside functions, and under `if TYPE_CHECKING:`
(those never run, so they make no cycle, but they are still the layer reaching above itself). A
name imported from a package that re-exports it (`from waitstate import WaitstateClient`) counts
as an import of the module it comes from too.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import package_files

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "waitstate"

# Each layer, and the packages it must not import.
LAYERS = [
    ("waitstate.client", ("waitstate.gateway", "waitstate.mcp_server", "waitstate.cli")),
    ("waitstate.gateway", ("waitstate.cli",)),
    ("waitstate.mcp_server", ("waitstate.cli",)),
    (
        "waitstate.auth",
        ("waitstate.gateway", "waitstate.client", "waitstate.mcp_server", "waitstate.cli"),
    ),
]


@dataclass(frozen=True)
class Import:
    """One import statement of a module of the package, and the package's modules it loads."""

    importer: str
    where: str  # `path:line`, for messages
    targets: tuple[str, ...]
    deferred: bool  # inside a function: it runs when the function is called
    typing_only: bool  # under `if TYPE_CHECKING:`: it never runs


@dataclass(frozen=True)
class Scan:
    modules: frozenset[str]
    imports: tuple[Import, ...]


def scan(root: Path) -> Scan:
    """Every import of every module under `root / PACKAGE`."""
    files = {_module_name(path.relative_to(root)): path for path in package_files(root)}
    modules = frozenset(files)
    packages = {name for name, path in files.items() if path.name == "__init__.py"}
    statements = {
        name: list(_imports(ast.parse(path.read_text(), str(path)).body))
        for name, path in files.items()
    }

    # What each package re-exports: a name it imports (at its top, if only for type checkers, as
    # `waitstate` does for the names it loads on first use) from another module of the package.
    reexports: dict[tuple[str, str], str] = {}
    for package in packages:
        for node, deferred, _ in statements[package]:
            if isinstance(node, ast.ImportFrom) and not deferred:
                source = _source(node, package, True)
                defined = _nearest(source, modules)
                for alias in node.names:
                    if defined not in (None, package) and f"{source}.{alias.name}" not in modules:
                        reexports[package, alias.asname or alias.name] = defined

    imports = []
    for name, found in statements.items():
        where = files[name].relative_to(root).as_posix()
        for node, deferred, typing_only in found:
            loaded = []
            for target, imported in _targets(node, name, name in packages):
                module = _nearest(target, modules)
                # A re-export of a re-export... (`waitstate` -> `waitstate.mcp` -> servers),
                # followed for each name (`from waitstate.client import A, B`: A's module, and
                # B's).
                chain: list[str] = []
                while module is not None and module not in chain:
                    chain.append(module)
                    if module not in loaded:
                        loaded.append(module)
                    module = reexports.get((module, imported)) if imported else None
            if loaded:
                imports.append(
                    Import(name, f"{where}:{node.lineno}", tuple(loaded), deferred, typing_only)
                )
    return Scan(modules, tuple(imports))


def _module_name(path: Path) -> str:
    parts = list(path.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(
    nodes: Iterable[ast.AST], deferred: bool = False, typing_only: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """The import statements among `nodes` and within them: whether each is inside a function
    (`deferred`), and whether under `if TYPE_CHECKING:` (`typing_only`)."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, deferred, typing_only
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.body, deferred, True)
            yield from _imports(node.orelse, deferred, typing_only)
        else:
            inner = deferred or isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            yield from _imports(ast.iter_child_nodes(node), inner, typing_only)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _source(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a `from ... import` names, made absolute."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _targets(
    node: ast.Import | ast.ImportFrom, importer: str, is_package: bool
) -> Iterator[tuple[str, str | None]]:
    """What an import names: `import a.b`'s `a.b`; for `from a import b`, `a.b` and the name
    `b` (`a.b` may be a module, or else `b` is a name `a` defines or re-exports)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
    else:
        source = _source(node, importer, is_package)
        for alias in node.names:
            yield f"{source}.{alias.name}", alias.name


def _nearest(name: str, modules: frozenset[str]) -> str | None:
    """The module of the package `name` is, or is in (None: another distribution's)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _edges(found: Scan, *, deferred: bool) -> dict[str, dict[str, str]]:
    """Which modules importing each module loads (-> where), as the interpreter runs them: a
    module's package is loaded before it (unless the importer is inside that package already,
    and so has loaded it)."""
    edges: dict[str, dict[str, str]] = {module: {} for module in found.modules}
    for imp in found.imports:
        if imp.typing_only or (imp.deferred and not deferred):
            continue
        inside = set(_ancestors(imp.importer))
        for target in imp.targets:
            for loaded in [*_ancestors(target), target]:
                if loaded not in inside and loaded != imp.importer:
                    edges[imp.importer].setdefault(loaded, imp.where)
    return edges


def cycles(found: Scan, *, deferred: bool) -> list[str]:
    """One cycle of each strongly connected group of modules, as `a -> b (where) -> ... -> a`."""
    edges = _edges(found, deferred=deferred)
    return [_one_cycle(group, edges) for group in _groups(edges) if len(group) > 1]


def _groups(edges: dict[str, dict[str, str]]) -> list[list[str]]:
    """Tarjan's strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(edges[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            groups.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return groups


def _one_cycle(group: list[str], edges: dict[str, dict[str, str]]) -> str:
    """A shortest cycle through the group's first module, within the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        module = queue.pop(0)
        for other in sorted(edges[module]):
            step = f"{other} ({edges[module][other]})"
            if other == start:
                return " -> ".join([*paths[module], step])
            if other in members and other not in paths:
                paths[other] = [*paths[module], step]
                queue.append(other)
    raise AssertionError(f"no cycle in {group}")


def crossings(found: Scan, layer: str, forbidden: Iterable[str]) -> list[str]:
    """The imports of `layer`'s modules of anything in `forbidden`: `where imports module`."""

    def within(module: str, package: str) -> bool:
        return module == package or module.startswith(f"{package}.")

    return [
        f"{imp.where} imports {target}"
        for imp in found.imports
        if within(imp.importer, layer)
        for target in imp.targets
        if any(within(target, package) for package in forbidden)
    ]


@functools.cache
def _package() -> Scan:
    return scan(ROOT)


def test_the_scan_reads_every_kind_of_import() -> None:
    # A scan that read nothing would pass every test below.
    found = _package()
    kinds = {
        (imp.importer, target): (imp.deferred, imp.typing_only)
        for imp in found.imports
        for target in imp.targets
    }

    assert len(found.modules) > 140  # a floor: merging modules lowers the count
    assert kinds["waitstate.gateway.delivery", "waitstate.client._updates"] == (False, False)
    assert kinds["waitstate.mcp.servers", "waitstate.mcp.sessions"] == (True, False)
    assert kinds["waitstate.auth.tokens", "waitstate.settings"] == (False, True)
    # `from waitstate.mcp import McpServers`: the package, and the module it re-exports it from.
    assert kinds["waitstate.worker", "waitstate.mcp"] == (False, False)
    assert kinds["waitstate.worker", "waitstate.mcp.servers"] == (False, False)


def test_no_import_cycle_among_the_modules_as_they_are_imported() -> None:
    found = cycles(_package(), deferred=False)

    assert not found, "\n".join(["import cycles:", *found])


def test_no_import_cycle_even_counting_the_imports_inside_functions() -> None:
    # A function's import runs only when the function is called, so a cycle through one fails no
    # import; but it is still a module reaching above its layer (as waitstate/mcp/servers.py did,
    # importing the tasks extension from tasks.py, which imports servers.py).
    found = cycles(_package(), deferred=True)

    assert not found, "\n".join(["import cycles:", *found])


@pytest.mark.parametrize(("layer", "forbidden"), LAYERS, ids=[layer for layer, _ in LAYERS])
def test_a_layer_imports_nothing_of_the_layers_over_it(layer: str, forbidden: tuple[str]) -> None:
    found = crossings(_package(), layer, forbidden)

    assert not found, "\n".join([f"{layer} may not import {', '.join(forbidden)}:", *found])


def test_the_checks_find_cycles_and_crossings_where_there_are_some(tmp_path: Path) -> None:
    sources = {
        "__init__.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from waitstate.client import Client\n"
        ),
        "client/__init__.py": "from waitstate.client.calls import Client\n",
        "client/calls.py": (
            "class Client:\n    def send(self):\n        from waitstate.gateway import app\n"
        ),
        "gateway/__init__.py": "",
        "gateway/app.py": "from waitstate.client import Client\n",
        "auth/__init__.py": "",
        "auth/tokens.py": "from . import keys\nfrom waitstate import Client\n",
        "auth/keys.py": "from waitstate.auth import tokens\n",
    }
    for name, text in sources.items():
        (tmp_path / PACKAGE / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / PACKAGE / name).write_text(text)

    found = scan(tmp_path)

    auth = (
        "waitstate.auth.keys -> waitstate.auth.tokens (waitstate/auth/keys.py:1)"
        " -> waitstate.auth.keys (waitstate/auth/tokens.py:1)"
    )
    assert cycles(found, deferred=False) == [auth]
    assert sorted(cycles(found, deferred=True)) == [
        auth,
        "waitstate.client -> waitstate.client.calls (waitstate/client/__init__.py:1)"
        " -> waitstate.gateway.app (waitstate/client/calls.py:3)"
        " -> waitstate.client (waitstate/gateway/app.py:1)",
    ]
    assert crossings(found, "waitstate.client", ["waitstate.gateway"]) == [
        "waitstate/client/calls.py:3 imports waitstate.gateway.app"
    ]
    # Through the root package's re-export (under TYPE_CHECKING there, loaded on first use).
    assert crossings(found, "waitstate.auth", ["waitstate.client"]) == [
        "waitstate/auth/tokens.py:2 imports waitstate.client",
        "waitstate/auth/tokens.py:2 imports waitstate.client.calls",
    ]


# --- imports inside functions ----------------------------------------------------------------------

# The imports a function may make, by file and module: the optional ones, each marked
# `# optional: ...` above it, which a process loads only once it uses them. Any other import
# belongs at the top of its module (an import cycle is broken by moving code, not by hiding the
# import in a function).
OPTIONAL_IMPORTS = {
    # A provider's SDK, loaded by a worker whose models use it (Anthropic's takes ~2.5 s and
    # ~45 MB; most workers call one provider).
    ("waitstate/providers/configured.py", "openai"),
    ("waitstate/providers/configured.py", "waitstate.providers.openai"),
    ("waitstate/providers/configured.py", "waitstate.providers.openai_responses"),
    ("waitstate/providers/configured.py", "anthropic"),
    ("waitstate/providers/configured.py", "waitstate.providers.anthropic"),
    # The mcp SDK (~0.9 s), loaded by a process's first session with a server: the CLI and an
    # app's module declare servers (waitstate.mcp.servers) without it.
    ("waitstate/mcp/servers.py", "waitstate.mcp.sessions"),
    # The object store's client (native code), loaded by the processes that use one.
    ("waitstate/blobs/__init__.py", "waitstate.blobs.s3"),
    # A question's schema checker (jsonschema, ~0.1 s), loaded by the CLI commands that show one.
    ("waitstate/cli/people.py", "waitstate.elicitation"),
    # The a2a SDK (the `a2a` extra), loaded by a worker whose runs push to A2A clients.
    ("waitstate/activities/pushes.py", "waitstate.a2a.pushed"),
}
MARKER = "# optional:"


def imports_inside_functions(root: Path) -> list[tuple[str, str, int]]:
    """Every import inside a function of the package's files (`workflows/` and `activities/`
    through the links), outside `if TYPE_CHECKING:`: `(path, module, line)`."""
    found = []
    for path in package_files(root):
        tree = ast.parse(path.read_text(), str(path))
        for node, deferred, typing_only in _imports(tree.body):
            if not deferred or typing_only:
                continue
            where = path.relative_to(root).as_posix()
            if isinstance(node, ast.Import):
                found += [(where, alias.name, node.lineno) for alias in node.names]
            else:
                found.append((where, _source(node, _module_name(Path(where)), False), node.lineno))
    return found


def unmarked(root: Path, found: Iterable[tuple[str, str, int]]) -> list[str]:
    """The imports of `found` with no `# optional:` comment in the four lines above them."""
    return [
        f"{where}:{line} imports {module}"
        for where, module, line in found
        if not any(
            MARKER in text
            for text in (root / where).read_text().splitlines()[max(0, line - 5) : line - 1]
        )
    ]


def test_no_import_inside_a_function_but_an_optional_one() -> None:
    found = imports_inside_functions(ROOT)
    named = {(where, module) for where, module, _ in found}
    optional = [entry for entry in found if entry[:2] in OPTIONAL_IMPORTS]

    assert not (
        others := [
            f"{where}:{line} imports {module}"
            for where, module, line in found
            if (where, module) not in OPTIONAL_IMPORTS
        ]
    ), "\n".join(["imports inside functions (move them to the top of the module):", *others])
    assert not unmarked(ROOT, optional), "optional imports without `# optional: ...` above them"
    # No entry outlives its import.
    assert named >= OPTIONAL_IMPORTS


def test_the_check_finds_imports_inside_functions(tmp_path: Path) -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n"
        "    from waitstate.settings import Settings\n"
        "def load():\n"
        "    # optional: yaml, for the config files that are YAML\n"
        "    import yaml\n"
        "    from . import settings\n"
        "    return yaml, settings\n"
        "class Worker:\n"
        "    async def run(self):\n"
        "        from waitstate.mcp.tasks import McpTaskBackend\n"
        "        return McpTaskBackend\n"
    )
    (tmp_path / PACKAGE / "tools").mkdir(parents=True)
    (tmp_path / PACKAGE / "tools" / "loader.py").write_text(source)

    found = imports_inside_functions(tmp_path)

    assert found == [
        ("waitstate/tools/loader.py", "yaml", 7),
        ("waitstate/tools/loader.py", "waitstate.tools", 8),
        ("waitstate/tools/loader.py", "waitstate.mcp.tasks", 12),
    ]
    assert unmarked(tmp_path, found) == ["waitstate/tools/loader.py:12 imports waitstate.mcp.tasks"]
