"""Small helpers shared by tests."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import socket
import string
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel
from temporalio import workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer, Worker

from examples.demo.basic import demo_tools
from tests.upstream import pydantic_says
from waitstate.apps import Apps
from waitstate.auth.tokens import ResumeTokens
from waitstate.cli.replay import replayer as agent_replayer
from waitstate.client._events import told as run_events_told
from waitstate.converter import DATA_CONVERTER
from waitstate.names import AGENT_RUN
from waitstate.providers.base import ProviderError
from waitstate.schemas import Message, ToolCall
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest
from waitstate.schemas.operations import Completion, Operation
from waitstate.schemas.questions import AnswerInput, AnswerOutcome, InputPolicy, InputRequest
from waitstate.schemas.run import CALL_TOOL, POLL_OPERATION, RunInput, RunResult, ToolCallInput
from waitstate.settings import Settings
from waitstate.tools import ToolRegistry, ToolSpec
from waitstate.worker import build_providers, build_workers
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.served import WORKFLOWS
from waitstate.workflows.versions import MARKERS

HISTORIES = Path(__file__).resolve().parent / "histories"
ADMITTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
# How long `eventually` waits by default: far longer than anything takes on a loaded 2-core
# machine, so it only turns a hang into a failure; no test depends on it.
EVENTUALLY_WITHIN = 30.0
T = TypeVar("T")

# One store for the session: conversations are content-addressed, so tests cannot collide.
TEST_BLOBS = Path(tempfile.mkdtemp(prefix="waitstate-test-blobs-"))


@asynccontextmanager
async def make_worker(
    client: Client,
    task_queue: str,
    *,
    tools: Sequence[ToolSpec] | None = None,
    max_cached_workflows: int = 100,
    settings: Settings | None = None,
    tokens: ResumeTokens | None = None,
    apps: Apps | None = None,
) -> AsyncIterator[Worker]:
    """The production worker wiring, running on a test's own task queue (serving `apps`, with
    `tools` besides theirs, when given)."""
    settings = settings or Settings(max_cached_workflows=max_cached_workflows)
    if settings.blob_dir == Settings().blob_dir:  # never the checkout's own store
        settings = dataclasses.replace(settings, blob_dir=TEST_BLOBS)
    apps = apps or Apps()
    providers = build_providers(settings, apps.providers, apps.scripts)
    if tools is None:
        tools = [] if apps.refs else demo_tools()
    async with httpx.AsyncClient(timeout=10) as http:
        # With a model queue in `settings`, its worker too (the first is the runs' queue's).
        worker, *others = build_workers(
            client,
            settings,
            providers,
            [*tools, *apps.tools],
            http,
            tokens=tokens,
            task_queue=task_queue,
            agents=apps.agents,
            tool_deps=apps.tool_deps,
            mcp=apps.mcp,
            scorers=apps.scorers,
        )
        try:
            async with contextlib.AsyncExitStack() as running:
                for each in (worker, *others):
                    await running.enter_async_context(each)
                yield worker
        finally:
            await providers.aclose()


def process_env(client: Client, task_queue: str | None = None, **variables: str) -> dict[str, str]:
    """The environment for a process of the test's own (a worker, the CLI, the gateway) that
    reaches the test's Temporal server, and its task queue when given: this process's
    environment with `variables` on top."""
    env = {**os.environ, "TEMPORAL_ADDRESS": client.service_client.config.target_host}
    if task_queue is not None:
        env["WAITSTATE_TASK_QUEUE"] = task_queue
    return {**env, **variables}


async def start_run(
    client: Client, task_queue: str, run_input: RunInput, *, workflow_id: str | None = None
) -> WorkflowHandle[AgentRunWorkflow, RunResult]:
    """Start an agent run of `run_input` on the test's task queue, under `workflow_id` or a
    fresh `run-<uuid>`."""
    return await client.start_workflow(
        AgentRunWorkflow.run,
        run_input,
        id=workflow_id or f"run-{uuid.uuid4()}",
        task_queue=task_queue,
    )


async def eventually(
    check: Callable[[], Awaitable[T | None]], what: str, within: float = EVENTUALLY_WITHIN
) -> T:
    """Poll `check` until it returns a truthy value, and return that value (never None: a
    check that answers `X | None` gives an `X`).

    Tests wait for the event they need (a request opened, a job created, a counter exported),
    never for a fixed time: `within` only bounds a wait that would otherwise hang.

    Args:
        check: Asks once; a falsy answer means "not yet".
        what: What is awaited, for the failure message ("the approval request").
        within: Seconds before giving up, counting the checks themselves.

    Raises:
        AssertionError: `within` passed first; names `what` and the last answer.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    value: T | None = None
    try:
        async with asyncio.timeout_at(deadline):
            while True:
                value = await check()
                if value:
                    return value
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(
            f"waited {within:g} s for {what}; the last check answered {value!r}"
        ) from None


async def accepted_updates(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The names of the Updates the run (its whole chain, for a handle without a run id)
    accepted, in order."""
    return [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]


async def first_question(handle: WorkflowHandle[Any, Any], what: str) -> InputRequest:
    """The first question the run shows in its status, once it shows one (`what` names it
    in the failure message)."""

    async def asked() -> InputRequest | None:
        state = await handle.query(AgentRunWorkflow.status)
        return next(iter(state.questions.values()), None)

    return await eventually(asked, what)


async def until_the_update_is_admitted(
    client: Client, handle: WorkflowHandle[Any, Any], update_id: str
) -> None:
    """Until the server holds the run's Update `update_id` (admitted: it goes to the run with
    the run's next workflow task), for a test that sends it with no worker up and must know it
    reached the server before a worker comes."""

    async def admitted() -> bool:
        request = PollWorkflowExecutionUpdateRequest(
            namespace=client.namespace,
            update_ref=UpdateRef(
                workflow_execution=WorkflowExecution(
                    workflow_id=handle.id, run_id=handle.result_run_id or ""
                ),
                update_id=update_id,
            ),
            identity="test",
            wait_policy=WaitPolicy(lifecycle_stage=ADMITTED),
        )
        try:
            polled = await client.workflow_service.poll_workflow_execution_update(
                request, timeout=timedelta(seconds=5)
            )
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.DEADLINE_EXCEEDED):
                return False  # not sent yet
            raise
        return polled.stage >= ADMITTED

    await eventually(admitted, f"the Update {update_id} admitted by the server")


async def quiet_history_length(handle: WorkflowHandle[Any, Any]) -> int:
    """The run's history length once it has nothing to do but wait (for a person, a webhook
    or a timer): no workflow task and no activity pending, so only a request that reaches it
    can add an event."""

    async def quiet() -> int:
        described = await handle.describe()
        raw = described.raw_description
        busy = raw.HasField("pending_workflow_task") or len(raw.pending_activities) > 0
        return 0 if busy else described.history_length

    return await eventually(quiet, f"run {handle.id} to wait with nothing pending")


async def callback_token(
    tokens: ResumeTokens, handle: WorkflowHandle[Any, Any], operation: Operation
) -> str:
    """The resume token the run's start activity handed the external system for `operation`,
    minted again from the same claims: the run, the operation, its expiry, and the nonce the
    run chose, which its history holds (no secret: a token needs the key). For a test that
    plays the external system when it cannot read what the system was given."""
    nonce = None
    async for event in handle.fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        scheduled = event.activity_task_scheduled_event_attributes
        if scheduled.activity_type.name != CALL_TOOL:
            continue
        [call] = DATA_CONVERTER.payload_converter.from_payloads(
            scheduled.input.payloads, [ToolCallInput]
        )
        # The operation's id is the activity's.
        if scheduled.activity_id == operation.operation_id:
            nonce = call.nonce
    return tokens.mint(handle.id, operation.operation_id, operation.expires_at, nonce=nonce).token


async def history_bytes(client: Client, workflow_id: str, run_id: str) -> tuple[int, int]:
    """Bytes of history of every run in a continue-as-new chain from `run_id`, and how many
    runs it has."""
    total, runs = 0, 0
    next_run: str | None = run_id
    while next_run:  # a walk along the chain, not a wait: each run's history is complete
        runs += 1
        handle = client.get_workflow_handle(workflow_id, run_id=next_run)
        next_run = None
        async for event in handle.fetch_history_events():
            total += event.ByteSize()
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                next_run = (
                    event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )
    return total, runs


async def scheduled_activities(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """Activity type names, in the order the run scheduled them."""
    names = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
    return names


async def expiries(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str]]:
    """What the run's event stream tells of its people's waits that passed: each
    `approval.expired` or `question.expired` with the request's id, in order (one run)."""
    described = await handle.describe()
    events = [event async for event in handle.fetch_history_events()]
    told, _ = run_events_told(described.run_id, events)
    return [
        (e.kind, e.detail.get("request_id") or e.detail.get("question_id") or "")
        for e in told
        if e.kind.endswith(".expired")
    ]


async def activity_attempts(handle: WorkflowHandle[Any, Any]) -> list[int]:
    """The attempt number of every activity that ran to completion or failure."""
    attempts = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attempts.append(event.activity_task_started_event_attributes.attempt)
    return attempts


async def replays(handle: WorkflowHandle[Any, Any], name: str) -> None:
    """The run's history replays on today's code, and a history of the path it took (`name`)
    is committed under tests/histories/, which test_replay checks every later change against:
    a path without one fails, so no new path that waits goes unrecorded. With
    WAITSTATE_RECORD_HISTORIES=1 the run's history is kept there: as `<name>.json` for a run of
    the 1.0 baseline as first recorded, `<name>.revision-<n>.json` for a run of a later
    revision (`RunInput.revision`), or `<name>.<patch>.json` for a run of a later patch (the
    newest of `MARKERS` it records).
    A history already kept is never written again."""
    history = await handle.fetch_history()
    replayer = agent_replayer(list(WORKFLOWS))
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    if os.environ.get("WAITSTATE_RECORD_HISTORIES") != "1":
        assert committed_histories(name), (
            f"no history of {name!r} is committed under tests/histories/: record it with "
            "WAITSTATE_RECORD_HISTORIES=1 (docs/versions.md) and commit the new file"
        )
        return
    await keep_history(name, history)


def committed_history(name: str, text: str) -> WorkflowHistory:
    """The committed history `name` (its JSON `text`), under the workflow id it was recorded
    with where its commands name it (a tree's children are `<parent id>/<node>`: replayed
    under another id, the child it starts would not be the recorded one); else `name`."""
    workflow_id = name
    for event in json.loads(text)["events"]:
        started = event.get("startChildWorkflowExecutionInitiatedEventAttributes")
        if started is not None:
            workflow_id = str(started["workflowId"]).rsplit("/", 1)[0]
            break
    return WorkflowHistory.from_json(workflow_id, text)


async def keep_history(name: str, history: WorkflowHistory) -> Path:
    """Keeps a history of the path `name` under tests/histories/, named by its version (see
    `replays`), unless one of that version is kept already: a history is never recorded
    again."""
    # The newest marker the run records names its history (none since the 1.0 baseline).
    patches = recorded_patches(history.events)
    version = next((p for p in reversed(MARKERS) if p in patches), None)
    if version is None and (revision := await recorded_revision(history)) > 0:
        version = f"revision-{revision}"
    path = HISTORIES / (f"{name}.json" if version is None else f"{name}.{version}.json")
    if not path.exists():
        path.write_text(history.to_json())
    return path


async def recorded_revision(history: WorkflowHistory) -> int:
    """The revision of the run's behaviour its history was recorded with (its input's; 0 for
    a workflow of another type, which has no revisions)."""
    started = history.events[0].workflow_execution_started_event_attributes
    if started.workflow_type.name != AGENT_RUN:
        return 0
    [run_input] = await DATA_CONVERTER.decode(started.input.payloads, [RunInput])
    assert isinstance(run_input, RunInput)
    return run_input.recorded_revision()


def committed_histories(name: str) -> list[Path]:
    """The committed histories of the path `name`, of every workflow version it was recorded
    in (`<name>.json`, `<name>.revision-<n>.json`, `<name>.<patch>.json`)."""
    return sorted([*HISTORIES.glob(f"{name}.json"), *HISTORIES.glob(f"{name}.*.json")])


def recorded_patches(events: Sequence[Any]) -> set[str]:
    """The patch ids a history's markers record."""
    found = set()
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        details = event.marker_recorded_event_attributes.details
        for payload in details["patch-data"].payloads if "patch-data" in details else []:
            found.add(str(json.loads(payload.data).get("id", "")))
    return found


async def provider_error(settings: Settings, model: str) -> ProviderError:
    """What the provider of `model` (a spec, `openai:any-name`), built as a worker with
    `settings` builds it, raises for a call of one message, called directly: what a model call
    of a run says when it fails (the SDK's and the transport's words in it are theirs)."""
    providers = build_providers(settings)
    provider, name = providers.resolve(model)
    try:
        await provider.complete(name, "", [Message(role="user", content="hello")], [])
    except ProviderError as err:
        return err
    finally:
        await providers.aclose()
    raise AssertionError(f"{model} answered: the test means it to fail")


async def first_unreplayable(
    replayer: Replayer, history: WorkflowHistory
) -> tuple[int, str] | None:
    """The last event (its id and type) of the shortest beginning of `history` whose replay
    fails (every longer one fails too), or None if it replays whole: where a replay cannot get
    past, rather than Core's words for why (its own). Core may find that a command's event
    disagrees only once another event follows it."""

    async def fails(through: int) -> bool:
        events = [e for e in history.events if e.event_id <= through]
        replay = await replayer.replay_workflow(
            WorkflowHistory(history.workflow_id, events), raise_on_replay_failure=False
        )
        return replay.replay_failure is not None

    ids = [e.event_id for e in history.events]
    if not await fails(ids[-1]):
        return None
    low, high = 0, len(ids) - 1
    while low < high:
        middle = (low + high) // 2
        if await fails(ids[middle]):
            high = middle
        else:
            low = middle + 1
    event = history.events[high]
    return event.event_id, EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


async def call_tool(registry: ToolRegistry, name: str, **arguments: Any) -> tuple[Any, bool]:
    """Run a tool as the worker would: the model's JSON in; the text it reads out, as JSON
    when it is JSON, and whether it is an error."""
    result = await registry.run(ToolCall(id="call_1", name=name, arguments=json.dumps(arguments)))
    try:
        return json.loads(result.content), result.is_error
    except json.JSONDecodeError:
        return result.content, result.is_error


# --- the gateway's answers ------------------------------------------------------------------


def text_question(
    question_id: str, tool: str, key: str, message: str, asked_at: datetime, policy: InputPolicy
) -> InputRequest:
    """A question of operation op-1's `tool` asking for one text field, `key`, within the hour
    from `asked_at`."""
    return InputRequest(
        question_id=question_id,
        operation_id="op-1",
        tool=tool,
        key=key,
        message=message,
        requested_schema={"type": "object", "properties": {key: {"type": "string"}}},
        asked_at=asked_at,
        expires_at=asked_at + timedelta(hours=1),
        policy=policy,
    )


@workflow.defn(sandboxed=False)
class OpenUntilEnded:
    """A run that stays open until it is told to `end` (a run owning blobs, keeping a version
    draining...)."""

    def __init__(self) -> None:
        self._ended = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._ended)

    @workflow.signal
    def end(self) -> None:
        self._ended = True


def approval_request(
    request_id: str, tool: str, asked_at: datetime, policy: ApprovalPolicy, **fields: Any
) -> ApprovalRequest:
    """Request `request_id` to approve a call of `tool` (call_1, for the reason `tool`), asked
    at `asked_at` and open for `policy`'s timeout; `fields`: its others (e.g. `arguments`)."""
    given: dict[str, Any] = {
        "tool_call_id": "call_1",
        "reason": tool,
        "expires_at": asked_at + policy.timeout,
    }
    return ApprovalRequest(
        request_id=request_id, tool=tool, requested_at=asked_at, policy=policy, **given | fields
    )


def not_json(model: type[BaseModel], body: bytes) -> str:
    """What the gateway says of a `body` that is not JSON, read as a `model`: the whole body's
    name (ours) and pydantic's reason."""
    return f"body: {pydantic_says(model, body, 'json_invalid')}"


# Bodies the gateway's complete endpoint refuses with 422 (body, error code, what the message
# says), against a recording deliverer (tests/gateway/test_app.py) and a real run
# (tests/gateway/test_real_server.py).
MALFORMED_COMPLETIONS = [
    *[
        (body, "invalid_json", not_json(Completion, body))
        for body in (b"not json", b"", b'{"status": "succeeded",', b"\xff\xfe")
    ],
    (b"[]", "invalid_completion", "body"),
    (b'{"status": "failed"}', "invalid_completion", "needs an error"),
    (b'{"status": "exploded"}', "invalid_completion", "status"),
    (
        b'{"result": 1}',
        "invalid_completion",
        "status: " + pydantic_says(Completion, b'{"result": 1}', "missing"),
    ),
    (
        b'{"status": "succeeded", "result": 1, "result_ref": "r"}',
        "invalid_completion",
        "not both",
    ),
    # Numbers JSON cannot keep: taken, they would be stored as null.
    (b'{"status": "succeeded", "result": {"rows": NaN}}', "non_finite_number", "result.rows:"),
    (b'{"status": "succeeded", "result": [1, Infinity]}', "non_finite_number", "result.1:"),
    (b'{"status": "succeeded", "result": {"t": -1e999}}', "non_finite_number", "result.t:"),
]


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> str:
    """The response is `status` with the gateway's error shape; returns its message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] and body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return str(body["error"]["message"])


def assert_page(response: httpx.Response, status: int, headers: dict[str, str]) -> str:
    """The HTML page `response` is, once it is known to be one with `status` and `headers`
    (and no stack trace)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    for name, value in headers.items():
        assert response.headers[name] == value, name
    assert "Traceback" not in response.text
    return response.text


def random_request(
    rng: random.Random,
    genuine: str,
    token: Callable[[timedelta], str],
    operation_ids: Sequence[str],
    max_body: int,
) -> tuple[str, bytes, dict[str, str]]:
    """A random completion request: (path, body, headers). Bodies are random bytes (up to
    twice `max_body`), text, valid completions and corrupted ones; tokens are missing,
    `genuine`, garbage, corrupted or expired (`token(expires_in)` mints one); paths name
    `operation_ids` or garbage."""
    printable = string.ascii_letters + string.digits + string.punctuation + " "

    def text(limit: int) -> str:
        return "".join(rng.choice(printable) for _ in range(rng.randint(0, limit)))

    def body() -> bytes:
        kind = rng.randrange(4)
        if kind == 0:
            return rng.randbytes(rng.randint(0, max_body * 2))
        if kind == 1:
            return text(200).encode()
        valid = rng.choice(
            [
                b'{"status": "succeeded", "result": {"a": [1, 2]}}',
                b'{"status": "failed", "error": {"code": "x", "message": "y"}}',
                b'{"status": "running", "progress": "10%"}',
            ]
        )
        if kind == 2:
            return valid
        cut = rng.randrange(len(valid))
        return valid[:cut] + bytes([rng.randrange(256)]) + valid[cut + 1 :]

    def authorization() -> dict[str, str]:
        choice = rng.randrange(6)
        if choice == 0:
            return {}
        if choice == 1:
            return {"Authorization": f"Bearer {genuine}"}
        if choice == 2:
            return {"Authorization": f"Bearer {text(300)}"}
        if choice == 3:
            cut = rng.randrange(len(genuine))
            corrupted = f"{genuine[:cut]}{rng.choice(printable)}{genuine[cut + 1 :]}"
            return {"Authorization": f"Bearer {corrupted}"}
        if choice == 4:
            return {"Authorization": text(100)}
        return {"Authorization": f"Bearer {token(-timedelta(seconds=1))}"}

    operation_id = rng.choice([*operation_ids, quote(text(20), safe="") or "x"])
    headers = {**authorization(), "Content-Type": rng.choice(["application/json", text(30)])}
    if rng.random() < 0.2:
        headers["X-" + "".join(rng.choices(string.ascii_letters, k=8))] = text(50)
    # Header values cannot start or end with spaces (httpx refuses to send them).
    headers = {name: value.strip() for name, value in headers.items()}
    return f"/v1/operations/{operation_id}/complete", body(), headers


async def until_the_poll_has_heartbeated(handle: WorkflowHandle[Any, Any]) -> None:
    """The run's poll activity is running and the server holds a heartbeat of it, which is
    what a worker that takes over resumes from."""

    async def heartbeated() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        return any(
            a.activity_type.name == POLL_OPERATION and a.heartbeat_details.payloads for a in pending
        )

    await eventually(heartbeated, "a heartbeat of the poll activity")


# --- A person's answer to a run's question --------------------------------------------------------


async def accept(
    handle: WorkflowHandle[Any, Any],
    question: InputRequest,
    content: dict[str, Any],
    responder: str = "ana",
) -> AnswerOutcome:
    """`responder` accepts the run's `question` with `content` (the run's `answer` update)."""
    answer = AnswerInput(
        question_id=question.question_id, action="accept", content=content, responder=responder
    )
    return await handle.execute_update(AgentRunWorkflow.answer, answer)


@contextmanager
def taken_port() -> Iterator[int]:
    """A port of 127.0.0.1 another process (this one) listens on while the block runs."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


async def exit_and_last_error(*command: str, **options: Any) -> tuple[int | None, str]:
    """Run `command` (`options`: `cwd`, `env`) to its end, within a minute: its exit status and
    the last line it wrote to stderr."""
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, **options
    )
    async with asyncio.timeout(60):
        _, stderr = await process.communicate()
    return process.returncode, stderr.decode().splitlines()[-1]


def package_files(root: Path) -> list[Path]:
    """The `.py` files of the package `waitstate` under `root`, those of `workflows/` and
    `activities/` included: the package reaches them through links (`waitstate/workflows`),
    which `Path.rglob` does not follow."""
    return sorted(
        Path(folder) / name
        for folder, _, names in os.walk(root / "waitstate", followlinks=True)
        for name in names
        if name.endswith(".py")
    )
