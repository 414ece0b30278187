"""Installing the project adds one top-level name, `waitstate`, and its two commands
(`waitstate`, `waitstate-worker`): a user's project keeps every other name for itself, the
layout of Temporal's samples (`workflows.py`, `activities.py`, `worker.py`, `starter.py`)
included, and the installed CLI works beside it. `waitstate` never imports any part of the
checkout that is not the library."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.docs import page, section
from tests.helpers import accepted_updates, eventually, package_files
from tests.rigs import ServerProcess, WorkerProcess, service_port
from tests.tiers import SUBPROCESS, needs
from waitstate.cli.runs import NO_TOOLS

ROOT = Path(__file__).resolve().parent.parent
# The checkout's top-level parts that are not the library: `waitstate` imports none of them.
NOT_THE_LIBRARY = {
    "workflows", "activities", "worker", "starter", "examples", "chaos", "bench", "scripts",
    "tests",
}  # fmt: skip
# Far above what each step takes on a loaded 2-core machine: only turns a hang into a failure.
STEP_WITHIN = 180

EXPORT_TASK = "Export Q3 transactions and file them in the compliance folder"
EXPORT_TOOLS = "start_export,verify_row_count,upload_file,notify_team"
KEYS = "wheel:" + "w" * 40

# A user's project, laid out as Temporal's samples are: its own workflow and worker...
USER_WORKFLOWS = '''
"""The user's own workflow."""
from temporalio import workflow


@workflow.defn
class SayHello:
    @workflow.run
    async def run(self, name: str) -> str:
        return f"Hello, {name}!"
'''
USER_WORKER = '''
"""The user's own worker."""
import asyncio

from temporalio.client import Client
from temporalio.worker import Worker

from workflows import SayHello


async def main() -> None:
    client = await Client.connect("localhost:7233")
    await Worker(client, task_queue="hello", workflows=[SayHello]).run()


if __name__ == "__main__":
    asyncio.run(main())
'''
USER_ACTIVITIES = '''
"""The user's own activities."""
from temporalio import activity


@activity.defn
async def greet(name: str) -> str:
    return f"Hello, {name}!"
'''
USER_STARTER = '''
"""The user's own starter."""
print("the user's starter")
'''
# ... and a script of theirs that runs an agent with the installed waitstate: argv is the
# task, its tools and the run's id; it prints what it saw as one JSON object.
USER_AGENT = """
import json
import sys

import waitstate
import workflows
from waitstate import RunInput, WaitstateClient


async def main() -> None:
    task, tools, run_id = sys.argv[1:]
    client = await WaitstateClient.connect()
    started = await client.start(RunInput(task=task, tools=tools.split(",")), run_id=run_id)
    outcome = await client.outcome(started.run_id)
    status = await client.status(started.run_id)
    result = await client.handle(started.run_id).result()
    print(json.dumps({
        "waitstate": waitstate.__file__,
        "workflows": workflows.__file__,
        "existing": started.existing,
        "outcome": outcome.model_dump(mode="json"),
        "steps": [step.kind for step in status.state.steps],
        "result": type(result).__name__,
    }))


waitstate.run_program(main())  # not asyncio.run: the interpreter's teardown can abort a client
"""

# ... an app of theirs (a tool and an agent), served by the installed `waitstate-worker` ...
USER_APP = '''
"""The user's own agent: one tool, the deterministic model's demo script (offline)."""
from waitstate import Agent, App, tool


@tool
async def calculate(expression: str) -> str:
    """Multiply two whole numbers: `a * b`."""
    a, b = expression.split("*")
    return str(int(a) * int(b))


app = App(
    agents=[
        Agent(
            "multiplier",
            instructions="Multiply what you are asked to.",
            model="scripted:demo",
            tools=[calculate],
        )
    ]
)
'''
# ... and by a worker of their own with `WaitstatePlugin`, beside their own workflow: argv is
# the task queue; it says "hello" once its own workflow ran, then serves until stopped.
USER_PLUGIN_WORKER = """
import asyncio
import os
import sys

from temporalio.client import Client
from temporalio.worker import Worker

from activities import greet
from waitstate.plugin import WaitstatePlugin
from workflows import SayHello


async def main() -> None:
    queue = sys.argv[1]
    plugin = WaitstatePlugin(["user_app:app"])
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"], plugins=[plugin])
    async with Worker(client, task_queue=queue, workflows=[SayHello], activities=[greet]):
        said = await client.execute_workflow(SayHello.run, "Ada", id=f"hello-{queue}", task_queue=queue)
        print(said, flush=True)
        await asyncio.Event().wait()


asyncio.run(main())
"""

# Where the project's interpreter finds waitstate, from the project (as `-m waitstate.gateway`).
WHERE = "import json, sys, waitstate; print(json.dumps({'waitstate': waitstate.__file__, 'path': sys.path}))"


def _layout_names() -> set[str]:
    """The top-level names of the layout block of docs/development.md (`name/` or `name.py` at
    column 0)."""
    block = section(page("docs/development.md"), "## Layout").split("```", 2)[1]
    return {match[1] for match in re.finditer(r"^([a-z_]+)(?:/|\.py)\s", block, re.MULTILINE)}


def _run(command: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=STEP_WITHIN, **kwargs)
    assert done.returncode == 0, f"{command}: {done.stderr}{done.stdout}"
    return done


@pytest.fixture(scope="module")
@needs(SUBPROCESS)
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built offline: no index, no build isolation (this venv's setuptools
    builds it), from a copy of the checkout, because setuptools writes `build/` into the tree it
    builds and takes what an earlier build left there."""
    source = tmp_path_factory.mktemp("source") / "waitstate"
    shutil.copytree(
        ROOT,
        source,
        # node_modules: the conformance suite's Node and packages (conformance/), some 240 MB.
        ignore=shutil.ignore_patterns(
            ".*", "build", "dist", "*.egg-info", "__pycache__", "tests", "node_modules"
        ),
    )
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", "--wheel-dir", out, source]
    )  # fmt: skip
    [built] = out.glob("waitstate-*.whl")
    return built


def test_install_adds_only_waitstate_and_its_two_commands(tmp_path: Path, wheel: Path) -> None:
    site = tmp_path / "site"
    _run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", site, wheel]
    )  # fmt: skip
    installed = {
        path.name.removesuffix(".py")
        for path in site.iterdir()
        if not path.name.endswith(".dist-info") and path.name not in {"bin", "__pycache__"}
    }
    commands = {path.name for path in (site / "bin").iterdir()}

    assert installed == {"waitstate"}
    assert installed <= _layout_names()
    assert commands == {"waitstate", "waitstate-worker"}


def test_the_wheel_holds_every_module_of_the_library_and_its_cli_runs_from_it(
    tmp_path: Path, wheel: Path
) -> None:
    # The library's subpackages (the client's and the CLI's modules among them) are found by
    # the `waitstate*` pattern: a package it missed would import in the checkout and not from
    # the wheel.
    with zipfile.ZipFile(wheel) as built:
        in_wheel = set(built.namelist())
    library = {path.relative_to(ROOT).as_posix() for path in package_files(ROOT)}
    site = tmp_path / "site"
    _run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", site, wheel]
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = _run(
        [sys.executable, "-c", "import waitstate.cli.runs as r; print(r.__file__)"],
        cwd=tmp_path,
        env=env,
    )
    usage = _run([site / "bin" / "waitstate", "--help"], cwd=tmp_path, env=env)
    worker_usage = _run([site / "bin" / "waitstate-worker", "--help"], cwd=tmp_path, env=env)

    assert sorted(library - in_wheel) == []
    assert where.stdout.strip() == str(site / "waitstate" / "cli" / "runs.py")
    for command in ("run", "status", "watch", "pending", "approve", "answer", "ops", "cleanup"):
        assert command in usage.stdout
    assert "--app" in worker_usage.stdout


def _absolute_imports(path: Path) -> Iterator[tuple[int, str]]:
    """Each module a file imports by its absolute name (anywhere in it), with the line."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def test_no_module_of_the_library_imports_what_is_not_the_library() -> None:
    files = package_files(ROOT)
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in files
        for line, module in _absolute_imports(path)
        if module.split(".")[0] in NOT_THE_LIBRARY
    ]

    assert len(files) > 40
    assert found == []


def test_only_the_worker_and_the_cli_entry_import_the_workflows_and_activities() -> None:
    # The rest reaches runs by name (waitstate/names.py): a client loads no workflow code.
    worker_code = {ROOT / "waitstate" / "workflows", ROOT / "waitstate" / "activities"}
    found = {
        path.relative_to(ROOT).as_posix()
        for path in package_files(ROOT)
        if path.parent not in worker_code
        for _, module in _absolute_imports(path)
        if module.split(".")[:2] in (["waitstate", "workflows"], ["waitstate", "activities"])
    }

    # The plugin and the CLI's replay and versions commands load them through these two.
    assert sorted(found) == ["waitstate/cli/main.py", "waitstate/worker.py"]


@pytest.mark.subprocess
def test_importing_every_module_of_the_library_loads_nothing_else_of_the_checkout() -> None:
    # From the checkout's root, where `worker` (its shim) and the rest can be imported:
    # whatever a module imports, at import time or through another, shows in sys.modules.
    script = """
import importlib, importlib.util, json, pkgutil, sys
import waitstate
names = [m.name for m in pkgutil.walk_packages(waitstate.__path__, "waitstate.")]
for name in names:
    importlib.import_module(name)
print(json.dumps({
    "modules": names,
    "importable": importlib.util.find_spec("worker") is not None,
    "loaded": sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:])),
}))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = _run([sys.executable, "-c", script, *NOT_THE_LIBRARY], cwd=ROOT, env=env)
    seen = json.loads(done.stdout)

    assert len(seen["modules"]) > 40 and "waitstate.gateway.__main__" in seen["modules"]
    assert seen["importable"]
    assert seen["loaded"] == []


# --- the wheel beside a Temporal project -------------------------------------------------------


def _fresh_venv(path: Path, wheel: Path) -> Path:
    """A new virtualenv with `wheel` installed, and this venv's site-packages (the dependencies,
    offline) as a plain path entry: the `.pth` files there, among them this checkout's editable
    install, do not apply, so no code of the checkout is importable. Returns its python."""
    _run([sys.executable, "-m", "venv", "--without-pip", path])
    python = path / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    dependencies = sysconfig.get_path("purelib")
    (Path(purelib.stdout.strip()) / "dependencies.pth").write_text(f"{dependencies}\n")
    _run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         "--quiet", wheel]
    )  # fmt: skip
    return python


def _user_project(path: Path) -> Path:
    path.mkdir()
    (path / "workflows.py").write_text(USER_WORKFLOWS)
    (path / "worker.py").write_text(USER_WORKER)
    (path / "activities.py").write_text(USER_ACTIVITIES)
    (path / "starter.py").write_text(USER_STARTER)
    (path / "run_agent.py").write_text(USER_AGENT)
    (path / "user_app.py").write_text(USER_APP)
    (path / "plugin_worker.py").write_text(USER_PLUGIN_WORKER)
    return path


async def _python(
    python: Path, args: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`python ARGS` without blocking the event loop (the demo systems serve in it)."""
    process = await asyncio.create_subprocess_exec(
        python, *args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    async with asyncio.timeout(STEP_WITHIN):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode() + out.decode()
    return subprocess.CompletedProcess(args, process.returncode, out.decode(), err.decode())


async def test_the_wheel_beside_a_temporal_project_runs_an_agent_and_serves_the_gateway(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, wheel: Path
) -> None:
    python = _fresh_venv(tmp_path / "venv", wheel)
    project = _user_project(tmp_path / "project")
    gateway_port = service_port()
    gateway_url = f"http://127.0.0.1:{gateway_port}"
    drop = {"PYTHONPATH", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "WAITSTATE_MODEL", "VIRTUAL_ENV"}
    async with serving(systems_app(export_seconds=0.2)) as systems_url:
        env = {k: v for k, v in os.environ.items() if k not in drop} | {
            "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
            "WAITSTATE_TASK_QUEUE": task_queue,
            "WAITSTATE_TOKEN_KEYS": KEYS,
            "GATEWAY_PORT": str(gateway_port),
            "GATEWAY_URL": gateway_url,
            "DEMO_SYSTEMS_URL": systems_url,
            "WAITSTATE_STATE_DIR": str(tmp_path / "state"),
            "WAITSTATE_RUN_COUNTS_SECONDS": "1",
        }
        # The waitstate worker, run from this checkout by an operator, on the same queue.
        worker = WorkerProcess(env, tmp_path / "worker.log")
        # The gateway, from the user's project with the installed wheel.
        gateway = ServerProcess(
            ["-m", "waitstate.gateway"],
            gateway_port,
            tmp_path / "gateway.log",
            env,
            python=python,
            cwd=project,
        )
        await worker.start()
        try:
            await gateway.start()
            where = await _python(python, ["-c", WHERE], project, env)
            agent = await _python(
                python, ["run_agent.py", EXPORT_TASK, EXPORT_TOOLS, f"beside-{task_queue}"],
                project, env,
            )  # fmt: skip
            # The installed CLI, in the project: its commands that load the worker's workflows
            # and markers load waitstate's, not the project's `worker` or `workflows`.
            waitstate = python.parent / "waitstate"
            replayed = await _python(
                waitstate,
                ["replay-check", "--query", f"WorkflowId = 'beside-{task_queue}'"],
                project,
                env,
            )
            versions = await _python(waitstate, ["versions", "--json"], project, env)
            async with httpx.AsyncClient(base_url=gateway_url, timeout=10) as http:
                health = await http.get("/healthz")

                async def counted() -> bool:
                    metrics = (await http.get("/metrics")).text
                    found = re.search(
                        r'^waitstate_runs\{status="completed"\} (\S+)$', metrics, re.M
                    )
                    return found is not None and float(found[1]) >= 1

                await eventually(counted, "the gateway to count completed runs", within=60)
            async with httpx.AsyncClient(timeout=10) as http:
                jobs = (await http.get(f"{systems_url}/_test/stats")).json()["jobs"]
        finally:
            await gateway.stop()
            await worker.stop()

    # Only the wheel's code ran in the project: none of the checkout's.
    found = json.loads(where.stdout)
    assert found["waitstate"].startswith(f"{tmp_path / 'venv'}/lib/")
    assert str(ROOT) not in found["path"]
    seen = json.loads(agent.stdout)
    assert seen["waitstate"].startswith(f"{tmp_path / 'venv'}/lib/")
    assert seen["workflows"] == str(project / "workflows.py")  # the user's, beside it
    # The run, started, read and awaited through the client.
    assert seen["existing"] is False
    assert seen["outcome"]["status"] == "completed"
    assert "filed them at compliance/" in seen["outcome"]["final_output"]
    assert "tool" in seen["steps"]  # the run's own answer to the status query
    assert seen["result"] == "RunResult"
    assert replayed.stdout == "replayed 1 run: 1 ok\n", replayed.stdout
    # waitstate's markers (none since the 1.0 baseline), read without the project's modules.
    assert json.loads(versions.stdout)["markers"] == [], versions.stdout
    # The export's webhook went through the wheel's gateway, as the run's Update.
    assert health.json() == {"status": "ok"}
    [export] = [job for job in jobs.values() if job["kind"] == "export"]
    assert [hook["status_code"] for hook in export["webhooks"]] == [200]
    updates = await accepted_updates(dev_env.client.get_workflow_handle(f"beside-{task_queue}"))
    assert updates == ["complete_operation"]


@asynccontextmanager
async def _serving(
    command: list[str | Path], cwd: Path, env: dict[str, str], log: Path, says: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A process of the project's, started, once its log says `says`; stopped when the block
    ends."""
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            *command, cwd=cwd, env=env, stdout=out, stderr=out
        )
    try:

        async def said() -> bool:
            text = await asyncio.to_thread(log.read_text, errors="replace")
            assert process.returncode is None, text
            return says in text

        await eventually(said, f"{command[0]} to say {says!r}", within=STEP_WITHIN)
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 30)


async def _multiply(
    cli: Path, question: str, project: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`waitstate run QUESTION --agent multiplier --wait --json`, the user's agent."""
    args = ["run", question, "--agent", "multiplier", "--wait", "--json"]
    return await _python(cli, args, project, env)


async def test_the_installed_commands_and_a_users_plugin_worker_serve_the_users_agent(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, wheel: Path
) -> None:
    # Nothing of the checkout: the wheel's two commands, run in the user's project, serve and
    # run the user's agent; then the user's own worker serves it with the plugin.
    python = _fresh_venv(tmp_path / "venv", wheel)
    project = _user_project(tmp_path / "project")
    bin = python.parent
    drop = {"PYTHONPATH", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "WAITSTATE_MODEL", "VIRTUAL_ENV"}
    env = {k: v for k, v in os.environ.items() if k not in drop} | {
        "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
        "WAITSTATE_STATE_DIR": str(tmp_path / "state"),
    }
    served = env | {"WAITSTATE_TASK_QUEUE": task_queue}
    installed_worker = [bin / "waitstate-worker", "--app", "user_app:app"]
    async with _serving(
        installed_worker, project, served, tmp_path / "worker.log", "worker polling"
    ):
        ran = await _multiply(bin / "waitstate", "What is 17 * 23?", project, served)
        # Without an agent, the installed CLI imports no app of its own here: it says so.
        bare = await _python(bin / "waitstate", ["run", "What is 2 * 3?"], project, served)

    theirs = f"{task_queue}-theirs"
    plugged = env | {"WAITSTATE_TASK_QUEUE": theirs}
    plugin = [python, "plugin_worker.py", theirs]
    async with _serving(plugin, project, plugged, tmp_path / "theirs.log", "Hello"):
        beside = await _multiply(bin / "waitstate", "What is 6 * 7?", project, plugged)

    first, second = json.loads(ran.stdout), json.loads(beside.stdout)
    assert first["status"] == "completed", ran.stdout
    assert "calculate -> 391" in first["final_output"], ran.stdout
    assert second["status"] == "completed", beside.stdout
    assert "calculate -> 42" in second["final_output"], beside.stdout
    assert "Hello, Ada!" in (tmp_path / "theirs.log").read_text()
    assert NO_TOOLS in bare.stderr, bare.stderr
