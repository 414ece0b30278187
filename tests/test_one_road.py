"""One road into a run (docs/development.md, "Layout"; STYLE 6a), read from the source with `ast`:
`waitstate.client.WaitstateClient` is the only code of the package that starts a workflow or
sends one an Update, a signal, a terminate or a cancel. The gateway, the pages, the inbox, the
MCP server and the CLI are adapters over it.

What counts, in every module of `waitstate` outside `waitstate/client/`:

- a call of a method only Temporal's client or a workflow handle has (`execute_update`,
  `start_workflow`, `get_update_handle`...), whatever it is called on;
- a call of `signal`, `terminate` or `cancel` on a workflow handle: one got in the same
  function from `get_workflow_handle`/`get_workflow_handle_for` or the client's `handle`, such a
  call itself, or a name that says it is one (`handle`, `self._handle`). The same words on
  anything else (an asyncio task, a job's backend, `WaitstateClient.cancel`) are not Temporal's.

Exceptions, each named: the workflows' own package (`workflows/`: the workflow side, where
`workflow.execute_activity` and child workflows are the run's own steps), and the blob cleanup
(`waitstate/cleanup.py`), which runs its own `BlobCleanupWorkflow`, not an agent run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from tests.helpers import package_files

ROOT = Path(__file__).resolve().parent.parent

# Methods of Temporal's `Client` and `WorkflowHandle` that start a workflow or send one
# something: nothing else has them.
TEMPORAL_ONLY = frozenset(
    {
        "execute_update",
        "start_update",
        "start_update_with_start_workflow",
        "execute_update_with_start_workflow",
        "signal_with_start",
        "start_workflow",
        "execute_workflow",
        "get_update_handle",
        "get_update_handle_for",
    }
)
# Methods of a workflow handle whose names other objects share (`asyncio.Task.cancel`).
HANDLE_ONLY = frozenset({"signal", "terminate", "cancel"})
# Calls that return a workflow handle.
HANDLE_GETTERS = frozenset({"get_workflow_handle", "get_workflow_handle_for", "handle"})

# Where these calls belong, by path from the package's root: the client, the workflows' side.
ROADS = ("waitstate/client/", "waitstate/workflows/")
# What else may make one of them: (path, method), each with its reason in the module docstring.
EXCEPTIONS = frozenset({("waitstate/cleanup.py", "execute_workflow")})


def _is_handle_getter(node: ast.expr) -> bool:
    """Whether `node` is a call that returns a workflow handle."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in HANDLE_GETTERS
    )


def _name_of(node: ast.expr) -> str | None:
    """The name a receiver is known by: `handle`, `self._handle` -> `_handle`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _handles(scope: ast.AST) -> set[str]:
    """The names bound in `scope` (not in the functions inside it) to a workflow handle."""
    names: set[str] = set()
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Await):
                value = value.value
            if _is_handle_getter(value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n for t in targets if (n := _name_of(t)) is not None)
        stack.extend(ast.iter_child_nodes(node))
    return names


def _is_handle(receiver: ast.expr, handles: set[str]) -> bool:
    """Whether a method's receiver is a workflow handle, as far as the source says."""
    if _is_handle_getter(receiver):
        return True
    name = _name_of(receiver)
    return name is not None and (name in handles or "handle" in name.lower())


def roads_off(path: str, source: str) -> list[str]:
    """The calls in `source` (the module at `path`, relative to the checkout) that reach a
    workflow other than through the client, as `path:line method`."""
    tree = ast.parse(source, filename=path)
    found: list[tuple[int, str]] = []
    scopes: list[ast.AST] = [tree]
    scopes += [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for scope in scopes:
        handles = _handles(scope)
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue  # a scope of its own
            stack.extend(ast.iter_child_nodes(node))
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = node.func.attr
            temporal = method in TEMPORAL_ONLY or (
                method in HANDLE_ONLY and _is_handle(node.func.value, handles)
            )
            if temporal and (path, method) not in EXCEPTIONS:
                found.append((node.lineno, method))
    return [f"{path}:{line} {method}" for line, method in sorted(found)]


def package_roads_off(root: Path) -> list[str]:
    """Every call in the package under `root` that reaches a workflow other than through the
    client (or an exception)."""
    found: list[str] = []
    for file in package_files(root):
        path = file.relative_to(root).as_posix()
        if path.startswith(ROADS):
            continue
        found += roads_off(path, file.read_text())
    return found


def _planted(sources: Iterable[tuple[str, str]]) -> list[str]:
    return [hit for path, source in sources for hit in roads_off(path, source)]


def test_only_the_client_starts_runs_or_sends_them_anything() -> None:
    assert package_roads_off(ROOT) == []


def test_the_package_is_walked_through_its_links() -> None:
    # The client's own calls are there to be found: the check reads the files it means to.
    client = [
        hit
        for file in package_files(ROOT)
        if (path := file.relative_to(ROOT).as_posix()).startswith("waitstate/client/")
        for hit in roads_off(path, file.read_text())
    ]
    assert any(hit.endswith(" execute_update") for hit in client)
    paths = {file.relative_to(ROOT).as_posix() for file in package_files(ROOT)}
    assert "waitstate/workflows/agent_run.py" in paths
    assert "waitstate/gateway/delivery.py" in paths


def test_a_planted_road_is_found() -> None:
    gateway = """
async def deliver(client, run_id, arg):
    return await client.get_workflow_handle(run_id).execute_update("decide", arg)

async def stop(client, run_id):
    handle = client.get_workflow_handle(run_id)
    await handle.cancel()

async def poke(self, run_id):
    await self._handle.signal("approve", run_id)
    await self._client.get_workflow_handle(run_id).terminate("done")

async def begin(client):
    await client.start_workflow("AgentRunWorkflow", id="r", task_queue="q")
    await client.execute_workflow("BlobCleanupWorkflow", id="c", task_queue="q")
"""
    assert _planted([("waitstate/gateway/planted.py", gateway)]) == [
        "waitstate/gateway/planted.py:3 execute_update",
        "waitstate/gateway/planted.py:7 cancel",
        "waitstate/gateway/planted.py:10 signal",
        "waitstate/gateway/planted.py:11 terminate",
        "waitstate/gateway/planted.py:14 start_workflow",
        "waitstate/gateway/planted.py:15 execute_workflow",
    ]


def test_what_is_not_temporals_is_not_flagged() -> None:
    source = """
import asyncio

async def tidy(client, backend, run_id):
    task = asyncio.create_task(asyncio.sleep(1))
    task.cancel()
    await backend.cancel("job-1")
    await client.cancel(run_id)  # WaitstateClient's: the road itself
    await client.handle(run_id).describe()  # a handle read, not sent to
"""
    assert _planted([("waitstate/gateway/fine.py", source)]) == []
    # The cleanup's own workflow is its exception, and only the cleanup's.
    clean = """
async def clean(client):
    await client.execute_workflow("BlobCleanupWorkflow", id="c", task_queue="q")
"""
    assert _planted([("waitstate/cleanup.py", clean)]) == []
    assert _planted([("waitstate/cli/clean.py", clean)]) == [
        "waitstate/cli/clean.py:3 execute_workflow"
    ]
