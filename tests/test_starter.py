"""The CLI as people run it: `starter.py` in a subprocess against the real dev server, with a
real worker, demo systems and model provider addresses over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from temporalio.client import ScheduleActionStartWorkflow, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from examples.demo.basic import demo_tools
from examples.demo.refunds import refund_tools
from examples.systems import create_app as systems_app
from examples.systems import serving
from tests.helpers import eventually, make_worker, process_env, provider_error, start_run
from tests.one_question_job import OneQuestionJob
from tests.tiers import SUBPROCESS, needs
from waitstate import (
    Completion,
    InputPolicy,
    Job,
    LongSpec,
    LongTool,
    Message,
    Question,
    StartContext,
    ToolCall,
    ToolDefinition,
    ToolSpec,
)
from waitstate.apps import Apps, load_apps
from waitstate.auth.tokens import ResumeTokens
from waitstate.blobs import LocalBlobStore
from waitstate.cleanup import SCHEDULE_ID
from waitstate.client import WaitstateClient
from waitstate.names import cli_command
from waitstate.schemas import RunInput, RunResult
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.operations import CompleteOperation
from waitstate.schemas.questions import AnswerInput
from waitstate.settings import Settings
from waitstate.workflows.agent_run import AgentRunWorkflow

ROOT = Path(__file__).resolve().parents[1]
PATIENCE = 60  # seconds: bound on every wait for the run or the CLI to get somewhere
FORK_APP = "tests.workflows.fork_app:app"
# The CLI as its hints type it, here as where the CLI runs: the checkout.
CLI_COMMAND = cli_command()


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str


@dataclass
class Cli:
    """Runs `python starter.py ...` with the test server's address and task queue."""

    env: dict[str, str]

    async def __call__(self, *args: str) -> Done:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "starter.py", *args, cwd=ROOT, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            async with asyncio.timeout(PATIENCE):
                stdout, stderr = await process.communicate()
        finally:
            if process.returncode is None:  # timed out: leave no process behind
                process.kill()
                await process.wait()
        assert process.returncode is not None
        return Done(process.returncode, stdout.decode(), stderr.decode())

    async def watch(self, run_id: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "starter.py", "watch", run_id, cwd=ROOT, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip


@pytest.fixture
@needs(SUBPROCESS)
def cli(dev_env: WorkflowEnvironment, task_queue: str) -> Cli:
    return Cli(process_env(dev_env.client, task_queue))


@pytest.fixture
async def systems() -> AsyncIterator[str]:
    async with serving(systems_app()) as url:
        yield url


async def _open_requests(handle: WorkflowHandle[Any, Any], count: int) -> list[str]:
    async def open_ids() -> list[str] | None:
        state = await handle.query(AgentRunWorkflow.status)
        ids = [r.request_id for r in state.approvals.values() if r.open]
        return ids if len(ids) == count else None

    return await eventually(open_ids, f"{count} open approval requests", PATIENCE)


def assert_refused(done: Done, error: str) -> None:
    """The command refused its input or its cluster: exit 2, `error` on stderr, nothing on
    stdout (so nothing was done)."""
    assert done.code == 2, done.stdout + done.stderr
    assert error in done.stderr
    assert done.stdout == ""


def _one_error_line(done: Done) -> str:
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    return done.stderr.strip()


async def test_decisions_are_applied_or_refused_and_the_cli_says_which(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, systems: str
) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        worker = make_worker(
            dev_env.client,
            task_queue,
            tools=[*demo_tools(), *refund_tools(http, systems)],
            # Links point at a gateway nobody calls here: the CLI decides by Update.
            settings=Settings(demo_systems_url=systems, gateway_url="http://127.0.0.1:9"),
            tokens=ResumeTokens({"cli": "c" * 40}, "cli"),
        )
        async with worker:
            handle: WorkflowHandle[Any, RunResult] = await start_run(
                dev_env.client,
                task_queue,
                RunInput(task="two refunds", model="scripted:two-refunds", tools=["issue_refund"]),
            )
            first, second = await _open_requests(handle, 2)
            approved = await cli(
                "approve", handle.id, "--request", first, "--reviewer", "dana", "--comment", "ok"
            )
            again = await cli("reject", handle.id, "--request", first, "--reason", "too late")
            unknown = await cli("approve", handle.id, "--request", "apr-nope")
            rejected = await cli(
                "reject", handle.id, "--request", second, "--reason", "over budget",
                "--reviewer", "lee",
            )  # fmt: skip
            async with asyncio.timeout(PATIENCE):
                result = await handle.result()
            state = await handle.query(AgentRunWorkflow.status)
        refunds = (await http.get(f"{systems}/refunds")).json()
    ended = await cli("approve", handle.id, "--request", second)

    assert (approved.code, approved.stderr) == (0, "")
    assert approved.stdout == f"request {first} of run {handle.id}: approved by dana\n"
    assert again.code == 1
    assert _one_error_line(again) == (
        f"error: reject refused by run {handle.id}: request already approved"
    )
    assert unknown.code == 1
    assert _one_error_line(unknown).startswith(f"error: approve refused by run {handle.id}: ")
    assert "apr-nope" in unknown.stderr
    assert (rejected.code, rejected.stdout) == (
        0,
        f"request {second} of run {handle.id}: rejected by lee\n",
    )
    assert ended.code == 1
    assert (
        _one_error_line(ended) == f"error: run {handle.id} has already ended: approve not applied"
    )
    # What the run did: each decision applied once; the refused ones left nothing behind.
    first_decision = state.approvals[first].decision
    second_decision = state.approvals[second].decision
    assert first_decision is not None and first_decision.reviewer == "dana"
    assert second_decision is not None and second_decision.comment == "over budget"
    assert state.approvals[first].ignored == [] and state.ignored_decisions == []
    assert result.status == "completed"
    assert len(refunds) == 1


async def test_run_wait_auto_approves_through_the_update(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, systems: str
) -> None:
    settings = Settings(demo_systems_url=systems, gateway_url="http://127.0.0.1:9")
    tokens = ResumeTokens({"cli": "c" * 40}, "cli")
    async with make_worker(dev_env.client, task_queue, settings=settings, tokens=tokens):
        done = await cli(
            "run", "publish the report", "--model", "scripted:ask-first",
            "--tools", "request_approval", "--wait", "--json", "--auto-approve-after", "0",
        )  # fmt: skip

    result = json.loads(done.stdout)
    [request] = result["approvals"].values()
    assert (done.code, done.stderr) == (0, "")
    assert result["status"] == "completed" and "approved" in result["final_output"]
    assert request["decision"]["reviewer"] == "auto-approve (demo)"


async def test_a_decision_for_an_unknown_run_or_an_unreachable_server(
    cli: Cli, closed_port: int
) -> None:
    unknown = await cli("approve", "no-such-run", "--request", "apr-1")
    unreachable = await Cli({**cli.env, "TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}"})(
        "reject", "no-such-run", "--request", "apr-1", "--reason", "no"
    )

    assert unknown.code == 1
    assert _one_error_line(unknown) == "error: no run with id no-such-run"
    assert unreachable.code == 2
    assert _one_error_line(unreachable).startswith(
        f"error: cannot reach Temporal at 127.0.0.1:{closed_port}: "
    )


@pytest.mark.parametrize("spec", ["anthropic: ", "openai:", "scripted: demo"])
async def test_a_blank_or_padded_model_name_is_refused(cli: Cli, spec: str) -> None:
    run_id = f"run-{uuid.uuid4()}"

    done = await cli("run", "hello", "--model", spec, "--id", run_id)
    status = await cli("status", run_id)

    assert done.code == 2 and done.stdout == ""
    assert repr(spec) in _one_error_line(done)
    assert status.code == 1, "no run was started"


async def test_a_run_given_a_token_budget_stops_at_it_and_says_what_it_spent(
    cli: Cli, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    run_id = f"run-{uuid.uuid4()}"
    loop = ("run", "loop", "--model", "scripted:forever", "--tools", "calculate", "--id", run_id)
    refused = await cli("run", "loop", "--on-exceed", "degrade", "--budget-tokens", "300")
    async with make_worker(dev_env.client, task_queue):
        done = await cli(*loop, "--budget-tokens", "300", "--wait")
        status = await cli("status", run_id)

    assert_refused(refused, "on_exceed 'degrade' needs degrade_to")
    assert done.code == 1, done.stdout + done.stderr  # it ended, not with an answer
    assert "budget_exceeded after" in done.stdout
    assert "error: budget exceeded: spent " in done.stdout
    assert "of 300 tokens" in done.stdout
    assert "; budget: " in status.stdout and "of 300 tokens, exceeded" in status.stdout


async def test_status_and_watch_show_a_model_call_being_retried(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, closed_port: int
) -> None:
    base_url = f"http://127.0.0.1:{closed_port}/v1"
    settings = Settings(openai_base_url=base_url, openai_api_key="test-key")
    # The provider's error, as the model call reports it (tests/activities/test_model.py).
    last_error = str(await provider_error(settings, "openai:any-name"))
    assert last_error.startswith("openai: no response: ")
    run_id = f"run-{uuid.uuid4()}"
    async with make_worker(dev_env.client, task_queue, settings=settings):
        started = await cli(
            "run", "hello", "--model", "openai:any-name", "--tools", "calculate", "--id", run_id
        )
        assert started.code == 0, started.stderr
        watch = await cli.watch(run_id)
        try:
            assert watch.stdout is not None
            async with asyncio.timeout(PATIENCE):
                while "model call retrying" not in (
                    line := (await watch.stdout.readline()).decode()
                ):
                    assert line, "watch ended without showing a retry"
                while "retrying: attempt" not in (status := await cli("status", run_id)).stdout:
                    pass  # each `status` is a process of its own: no need to pause between
                as_json = json.loads((await cli("status", run_id, "--json")).stdout)
            cancelled = await cli("cancel", run_id)
            async with asyncio.timeout(PATIENCE):
                await watch.communicate()
        finally:
            if watch.returncode is None:
                watch.kill()
                await watch.wait()

    assert re.fullmatch(
        rf"  model call retrying: attempt \d of 8, last error: {re.escape(last_error)}\n", line
    )
    lines = status.stdout.splitlines()
    assert lines[0] == f"run {run_id}: running"
    assert re.fullmatch(
        rf"model call retrying: attempt \d of 8, last error: {re.escape(last_error)}", lines[1]
    )
    [retry] = as_json["retrying"]
    assert retry["call"] == "model call" and retry["attempt"] >= 2
    assert (retry["maximum_attempts"], retry["last_error"]) == (8, last_error)
    assert as_json["status"] == "running"
    assert cancelled.code == 0 and watch.returncode == 1  # watch ends with the run


async def test_status_of_a_run_that_ended_while_no_worker_runs_reads_its_history(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    run_id = f"run-{uuid.uuid4()}"
    async with make_worker(dev_env.client, task_queue):
        ran = await cli(
            "run", "hello", "--model", "scripted:echo", "--tools", "calculate", "--id", run_id,
            "--wait",
        )  # fmt: skip

    # Nobody answers the status query (it waits out its 5 s): the outcome comes from history.
    status = await cli("status", run_id)

    assert ran.code == 0, ran.stderr
    assert (status.code, status.stderr) == (0, "")
    lines = status.stdout.splitlines()
    assert lines[0] == f"run {run_id}: completed"
    assert lines[1].startswith("no worker answered its status query (")
    assert lines[2:4] == ["task: hello", "model: scripted:echo"]
    assert re.fullmatch(r"started: 20\S+; ended: 20\S+", lines[4])
    assert "usage: 1 model call, " in status.stdout
    assert any(line.startswith("answer: ") and line.endswith(" hello") for line in lines)
    assert status.stdout.count("task: ") == 1


async def test_status_exits_1_for_a_run_that_ended_without_its_answer(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, systems: str
) -> None:
    answered, stopped, cancelled = (f"run-{uuid.uuid4()}" for _ in range(3))
    settings = Settings(demo_systems_url=systems, gateway_url="http://127.0.0.1:9")
    async with make_worker(dev_env.client, task_queue, settings=settings):
        await cli(
            "run",
            "hi",
            "--model",
            "scripted:echo",
            "--tools",
            "calculate",
            "--id",
            answered,
            "--wait",
        )
        await cli(
            "run", "loop", "--model", "scripted:forever", "--tools", "calculate",
            "--budget-tokens", "300", "--id", stopped, "--wait",
        )  # fmt: skip
        ask = ("run", "publish", "--model", "scripted:ask-first", "--tools", "request_approval")
        await cli(*ask, "--id", cancelled)
        handle = dev_env.client.get_workflow_handle(cancelled)
        await _open_requests(handle, 1)
        waiting = await cli("status", cancelled)
        await cli("cancel", cancelled)
        async with asyncio.timeout(PATIENCE):
            await WaitstateClient(dev_env.client).outcome(cancelled)
        codes = {run_id: (await cli("status", run_id)).code for run_id in (answered, stopped)}
        codes[cancelled] = (await cli("status", cancelled, "--json")).code
    # No worker: what the history says of how it ended, the same way.
    unanswered = await cli("status", stopped)

    assert waiting.code == 0, "a run still going"
    assert codes == {answered: 0, stopped: 1, cancelled: 1}
    assert unanswered.code == 1 and "no worker answered" in unanswered.stdout


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("accept", "says"),
    [
        ("not json", "argument --accept: not JSON: "),
        ("", "argument --accept: not JSON: "),
        ("{'region': 'EMEA'}", "argument --accept: not JSON: "),
        ('["EMEA"]', "argument --accept: a JSON object is needed"),
        ('"EMEA"', "argument --accept: a JSON object is needed"),
        ("null", "argument --accept: a JSON object is needed"),
        # Numbers JSON cannot keep: taken, they would reach the job as null.
        ('{"rows": NaN}', "argument --accept: not JSON: NaN is not a JSON number"),
        ('{"rows": -Infinity}', "argument --accept: not JSON: -Infinity is not a JSON number"),
        ('{"rows": 1e999}', "argument --accept: not JSON: 1e999 is beyond a double's range"),
    ],
)
async def test_an_answer_that_is_not_a_json_object_is_a_usage_error(
    closed_port: int, accept: str, says: str
) -> None:
    # Nothing listens at the address: an answer that got as far as Temporal would say so.
    cli = Cli({**os.environ, "TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}"})

    done = await cli("answer", "run-1", "--question", "q_1", "--accept", accept)

    assert (done.code, done.stdout) == (2, "")
    assert says in _one_error_line(done)
    assert _one_error_line(done).endswith(f"(usage: {CLI_COMMAND} answer --help)")


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--accept", "{}", "--decline"], "argument --decline: not allowed with argument --accept"),
        (["--decline", "--accept", "{}"], "argument --accept: not allowed with argument --decline"),
        ([], "one of the arguments --accept --decline is required"),
    ],
)
async def test_an_answer_accepts_or_declines_never_both(
    closed_port: int, args: list[str], says: str
) -> None:
    cli = Cli({**os.environ, "TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}"})

    done = await cli("answer", "run-1", *args)

    assert (done.code, done.stdout) == (2, "")
    assert _one_error_line(done) == f"error: {says} (usage: {CLI_COMMAND} answer --help)"


async def test_an_answer_for_an_unknown_run_or_an_unreachable_server(
    cli: Cli, closed_port: int
) -> None:
    unknown = await cli("answer", "no-such-run", "--accept", '{"region": "EMEA"}')
    named = await cli("answer", "no-such-run", "--question", "q_1", "--decline")
    unreachable = await Cli({**cli.env, "TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}"})(
        "answer", "no-such-run", "--question", "q_1", "--decline"
    )

    assert (unknown.code, named.code) == (1, 1)
    assert _one_error_line(unknown) == "error: no run with id no-such-run"
    assert _one_error_line(named) == "error: no run with id no-such-run"
    assert unreachable.code == 2
    assert _one_error_line(unreachable).startswith(
        f"error: cannot reach Temporal at 127.0.0.1:{closed_port}: "
    )


async def test_cleanup_once_prints_its_counts_and_schedule_creates_then_updates(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    gone = await blobs.put(b"of a forgotten run", f"forgotten-{task_queue}")
    await blobs.put(b"written before blobs had owners")
    await asyncio.sleep(1.1)  # both older than the retention of 1 s
    schedule = dev_env.client.get_schedule_handle(SCHEDULE_ID)
    async with make_worker(dev_env.client, task_queue, settings=Settings(blob_dir=blobs.root)):
        once = await cli("cleanup", "--retention", "1s")
    try:
        created = await cli("cleanup", "--schedule", "--every", "12h", "--retention", "7d")
        updated = await cli("cleanup", "--schedule")
        described = await schedule.describe()
    finally:
        await schedule.delete()
    bad = await cli("cleanup", "--every", "soon")

    assert (once.code, once.stderr) == (0, "")
    assert once.stdout.splitlines() == [
        "examined 2 blobs, deleted 1 (18 bytes) of runs ended over 1 s ago",
        "kept: 0 of open runs, 0 recent, 1 unowned",
    ]
    assert await blobs.owners(gone) == []
    assert created.stdout.startswith(f"schedule {SCHEDULE_ID} created: a blob cleanup every 12 h")
    assert updated.stdout.startswith(f"schedule {SCHEDULE_ID} updated: a blob cleanup every 1 day")
    assert "for the namespace's retention after their runs end" in updated.stdout
    action = described.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert (action.workflow, action.task_queue) == ("BlobCleanupWorkflow", task_queue)
    assert described.schedule.spec.intervals[0].every == timedelta(days=1)
    assert bad.code == 2 and "not a duration: 'soon'" in bad.stderr


# --- What comes from outside is shown, never obeyed -----------------------------------------------

# Text a terminal would act on: clear the screen, set the window's title, turn red, reverse the
# line (bidi override), and a newline that would pass for a line of the CLI's own.
HOSTILE = "\x1b[2J\x1b]0;owned\x07\x1b[31mred\u202etxet\x9b1m\nrun x: approved by admin"
SHOWN = r"\x1b[2J\x1b]0;owned\x07\x1b[31mred\u202etxet\x9b1m"
# What must never reach the terminal raw: C0 and C1 controls but tab and newline, DEL, bidi.
RAW_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


class _NoArgs(BaseModel):
    pass


def _hostile_job() -> OneQuestionJob:
    """A job that asks a person a question full of terminal escapes, then succeeds."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    question = Question(key="ok", message=f"Proceed?\n{HOSTILE}", requested_schema=schema)
    return OneQuestionJob(
        "hostile-1", question, Completion(status="succeeded", result={"ok": True})
    )


def _hostile_script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls the hostile job (or, with `request_approval` only, asks a person to approve, for
    a reason full of escapes), then answers with escapes of its own, as a model may."""
    if not any(m.role == "tool" for m in messages):
        if [tool.name for tool in tools] == ["request_approval"]:
            arguments = json.dumps({"action": "publish", "reason": HOSTILE})
            call = ToolCall(id="call_0", name="request_approval", arguments=arguments)
        else:
            call = ToolCall(id="call_0", name="hostile_job", arguments="{}")
        return Message(role="assistant", tool_calls=[call])
    return Message(role="assistant", content=f"done {HOSTILE}")


def _hostile_tool() -> ToolSpec:
    long = LongSpec(
        _hostile_job(),
        completion="poll",
        poll_interval=timedelta(seconds=0.2),
        input=InputPolicy(answered_by="person"),
    )
    return ToolSpec(name="hostile_job", description="A job that asks.", args=_NoArgs, long=long)


def _raw_controls(*done: Done) -> list[str]:
    return [repr(match) for d in done for match in RAW_CONTROL.findall(d.stdout + d.stderr)]


async def test_a_jobs_question_and_a_reviewers_name_are_shown_not_obeyed(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, systems: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    asked_id, approved_id = f"run-{uuid.uuid4()}", f"run-{uuid.uuid4()}"
    worker = make_worker(
        dev_env.client,
        task_queue,
        tools=[_hostile_tool()],
        # Notices go to the demo systems' outbox; links to a gateway nobody calls here.
        settings=Settings(demo_systems_url=systems, gateway_url="http://127.0.0.1:9"),
        tokens=ResumeTokens({"cli": "c" * 40}, "cli"),
        apps=Apps(scripts={"hostile": _hostile_script}),
    )
    async with worker:
        await client.start(
            RunInput(task="ask", model="scripted:hostile", tools=["hostile_job"]), run_id=asked_id
        )
        await client.start(
            RunInput(task="publish", model="scripted:hostile", tools=["request_approval"]),
            run_id=approved_id,
        )
        watch = await cli.watch(asked_id)
        try:

            async def asked() -> str | None:
                questions = await client.open_questions(asked_id)
                return questions[0].question_id if questions else None

            question_id = await eventually(asked, "the job's question", PATIENCE)
            [request_id] = await _open_requests(client.handle(approved_id), 1)
            pending = await cli("pending")
            open_status = await cli("status", asked_id)
            await client.answer(
                asked_id, AnswerInput(question_id=question_id, action="accept",
                                      content={"ok": True}, responder=HOSTILE),
            )  # fmt: skip
            await client.decide(
                approved_id, DecideInput(request_id=request_id, decision="approve",
                                         reviewer=HOSTILE),
            )  # fmt: skip
            async with asyncio.timeout(PATIENCE):
                out, err = await watch.communicate()
            watched = Done(watch.returncode or 0, out.decode(), err.decode())
            asked_status = await cli("status", asked_id)
            approved_status = await cli("status", approved_id)
        finally:
            if watch.returncode is None:
                watch.kill()
                await watch.wait()

    everything = (pending, open_status, watched, asked_status, approved_status)
    assert _raw_controls(*everything) == []
    assert all(done.code == 0 for done in everything), [d.stderr for d in everything]
    # The question and the approval's reason, escapes shown: on their own lines where a
    # question spans lines, on one line where the CLI lists them on one.
    assert f"    {SHOWN}" in watched.stdout.splitlines()
    assert rf"    publish: {SHOWN}\nrun x: approved by admin" in pending.stdout.splitlines()
    [listed] = [line for line in open_status.stdout.splitlines() if line.startswith("open quest")]
    assert listed.endswith(rf"for a person: Proceed?\n{SHOWN}\nrun x: approved by admin; "
                           + listed.rpartition("; ")[2])  # fmt: skip
    # Names that came with an answer and a decision stay in their step's line.
    assert any(
        line.endswith(rf"{question_id} answered by {SHOWN}\nrun x: approved by admin")
        for line in asked_status.stdout.splitlines()
    ), asked_status.stdout
    assert any(
        line.endswith(rf"approval {request_id} approved by {SHOWN}\nrun x: approved by admin")
        for line in approved_status.stdout.splitlines()
    ), approved_status.stdout
    # A model's answer keeps its lines, each shown.
    assert f"answer: done {SHOWN}" in asked_status.stdout.splitlines()
    assert "run x: approved by admin" in asked_status.stdout.splitlines()


def _region_tool() -> ToolSpec:
    schema = {
        "type": "object",
        "properties": {"region": {"type": "string", "enum": ["EMEA", "APAC"]}},
        "required": ["region"],
    }
    question = Question(key="region", message="Which region?", requested_schema=schema)
    job = OneQuestionJob("region-1", question, Completion(status="succeeded", result={}))
    long = LongSpec(
        job, completion="poll", poll_interval=timedelta(seconds=0.2),
        input=InputPolicy(answered_by="person"),
    )  # fmt: skip
    return ToolSpec(name="hostile_job", description="A job that asks.", args=_NoArgs, long=long)


async def test_pending_prints_an_answer_command_that_works_as_pasted(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    run_id = f"run-{uuid.uuid4()}"
    apps = Apps(scripts={"hostile": _hostile_script})
    async with make_worker(dev_env.client, task_queue, tools=[_region_tool()], apps=apps):
        await client.start(
            RunInput(task="ask", model="scripted:hostile", tools=["hostile_job"]), run_id=run_id
        )

        async def asked() -> bool:
            return bool(await client.open_questions(run_id))

        await eventually(asked, "the job's question", PATIENCE)
        pending = await cli("pending")
        [accept] = [line.strip() for line in pending.stdout.splitlines() if "--accept" in line]
        pasted = await asyncio.create_subprocess_shell(
            accept, cwd=ROOT, env=cli.env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(PATIENCE):
            out, err = await pasted.communicate()
        assert (pasted.returncode, err.decode()) == (0, ""), out.decode()
        async with asyncio.timeout(PATIENCE):
            outcome = await client.outcome(run_id)

    assert accept.startswith(f"{CLI_COMMAND} answer {run_id} --question ")
    assert out.decode().endswith("; the job has it\n")
    assert outcome.status == "completed"


class _ReportingJob(LongTool):
    """A job completed by webhook, whose token the test keeps to report as the job would."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    async def start(self, args: Any, context: StartContext) -> Job:
        assert context.callback_token is not None
        self.tokens.append(context.callback_token)
        return Job(job_id="job-1")

    async def status(self, job_id: str) -> Completion:
        return Completion(status="running")

    async def cancel(self, job_id: str) -> None:
        return None


async def test_watch_shows_every_progress_report_though_the_next_replaced_it_in_the_state(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    tokens = ResumeTokens({"cli": "c" * 40}, "cli")
    job = _ReportingJob()
    long = LongSpec(job, completion="callback")
    tool = ToolSpec(name="hostile_job", description="A job that reports.", args=_NoArgs, long=long)
    settings = Settings(gateway_url="http://127.0.0.1:9")
    apps = Apps(scripts={"hostile": _hostile_script})
    worker = make_worker(
        dev_env.client, task_queue, tools=[tool], apps=apps, settings=settings, tokens=tokens
    )
    async with worker:
        handle = await start_run(
            dev_env.client,
            task_queue,
            RunInput(task="report", model="scripted:hostile", tools=["hostile_job"]),
        )

        async def started() -> str | None:
            return job.tokens[0] if job.tokens else None

        claims = tokens.verify(await eventually(started, "the job's start", PATIENCE))

        async def report(delivery: str, completion: Completion) -> None:
            update = CompleteOperation(
                operation_id=claims.operation_id, nonce=claims.nonce, delivery_id=delivery,
                completion=completion,
            )  # fmt: skip
            await handle.execute_update(AgentRunWorkflow.complete_operation, update)

        # Two reports before anyone looks: the run's state keeps the second only.
        await report("d1", Completion(status="running", progress="1 of 2"))
        await report("d2", Completion(status="running", progress="2 of 2"))
        watch = await cli.watch(handle.id)
        lines: list[str] = []
        try:
            assert watch.stdout is not None
            async with asyncio.timeout(PATIENCE):  # watch shows where the run is now
                while not any(line.endswith(": 2 of 2") for line in lines):
                    line = await watch.stdout.readline()
                    assert line, "watch ended: " + "\n".join(lines)
                    lines.append(line.decode().strip())
            await report("d3", Completion(status="succeeded", result={"rows": 2}))
            async with asyncio.timeout(PATIENCE):
                out, _ = await watch.communicate()
        finally:
            if watch.returncode is None:
                watch.kill()
                await watch.wait()

    lines += out.decode().splitlines()
    progress = [line.strip() for line in lines if line.strip().startswith("operation ")]
    assert progress == [
        f"operation {claims.operation_id} (hostile_job): 1 of 2",
        f"operation {claims.operation_id} (hostile_job): 2 of 2",
    ]


# --- Starting a run: bad arguments, and an id that is taken ------------------------------------


async def test_an_empty_task_or_id_is_a_bad_argument_and_a_taken_id_is_said(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    run_id = f"run-{uuid.uuid4()}"
    echo = ("--model", "scripted:echo", "--tools", "calculate")
    empty_task = await cli("run", "", *echo)
    blank_task = await cli("run", "   ", *echo)
    empty_id = await cli("run", "hello", "--id", "", *echo)
    padded_id = await cli("run", "hello", "--id", f" {run_id}", *echo)
    async with make_worker(dev_env.client, task_queue):
        first = await cli("run", "hello", "--id", run_id, *echo, "--wait")
        again = await cli("run", "hello", "--id", run_id, *echo, "--wait")
        again_json = await cli("run", "hello", "--id", run_id, *echo, "--wait", "--json")
        other = await cli("run", "goodbye", "--id", run_id, *echo, "--wait")
        other_json = await cli("run", "goodbye", "--id", run_id, *echo, "--json")
    runs = [run async for run in dev_env.client.list_workflows(f'TaskQueue = "{task_queue}"')]

    for refused, says in [
        (empty_task, "error: the task is empty: say what the agent should do"),
        (blank_task, "error: the task is empty: say what the agent should do"),
        (empty_id, "error: --id is empty: give a run id, or leave --id out for a new one"),
        (padded_id, f"error: --id ' {run_id}' has spaces around it or control characters in it"),
    ]:
        assert (refused.code, refused.stdout, _one_error_line(refused)) == (2, "", says)
    assert [run.id for run in runs] == [run_id], "no run but the first was started"
    assert (first.code, first.stderr) == (0, "")
    # The same command again: the run it started, said so, followed to the same outcome.
    assert again.code == 0
    assert again.stderr == (
        f"run {run_id} already exists, with this task: not starting another; following it\n"
    )
    assert again.stdout.splitlines()[-2:] == first.stdout.splitlines()[-2:]
    assert json.loads(again_json.stdout)["existing"] is True
    assert json.loads(again_json.stdout)["status"] == "completed"
    # Another task under the same id: refused, never answered with the first run's outcome.
    for refused in (other, other_json):
        assert (refused.code, refused.stdout) == (1, "")
        assert _one_error_line(refused) == (
            f"error: run {run_id} already exists, with another task ('hello'): not starting a "
            f"new one; choose another --id (`status {run_id}` shows that run)"
        )


# --- status with no worker --------------------------------------------------------------------


async def test_status_without_a_worker_says_what_temporal_alone_knows(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, systems: str, closed_port: int
) -> None:
    waiting_id, retrying_id = f"run-{uuid.uuid4()}", f"run-{uuid.uuid4()}"
    settings = Settings(
        demo_systems_url=systems,
        gateway_url="http://127.0.0.1:9",
        openai_base_url=f"http://127.0.0.1:{closed_port}/v1",
        openai_api_key="test-key",
    )
    tokens = ResumeTokens({"cli": "c" * 40}, "cli")
    async with make_worker(dev_env.client, task_queue, settings=settings, tokens=tokens):
        waiting = await cli(
            "run", "publish the report", "--model", "scripted:ask-first",
            "--tools", "request_approval", "--id", waiting_id,
        )  # fmt: skip
        retrying = await cli(
            "run", "hello", "--model", "openai:any-name", "--tools", "calculate",
            "--id", retrying_id,
        )  # fmt: skip
        assert waiting.code == retrying.code == 0, waiting.stderr + retrying.stderr
        await _open_requests(dev_env.client.get_workflow_handle(waiting_id), 1)

        async def retried() -> bool:
            status = await cli("status", retrying_id)
            return "model call retrying: attempt " in status.stdout

        await eventually(retried, "the model call to be retried", PATIENCE)
    # The worker is gone: nobody answers the status query (each waits out its 5 s).
    text = await cli("status", waiting_id)
    as_json = await cli("status", waiting_id, "--json")
    retrying_text = await cli("status", retrying_id)

    assert (text.code, text.stderr) == (0, "")
    lines = text.stdout.splitlines()
    assert lines[0] == f"run {waiting_id}: waiting"
    assert re.fullmatch(
        r"no worker answered its status query \(.+\): this is what Temporal alone knows",
        lines[1],
    )
    assert lines[2:5] == ["task: publish the report", "model: scripted:ask-first", lines[4]]
    assert re.fullmatch(r"started: 20\d\d-\S+; ended: -", lines[4])
    assert re.fullmatch(r"waiting for: approval, until 20\d\d-\S+; pending operations: 0", lines[5])
    assert lines[-1].startswith("web ui: ")
    assert "turns 0" not in text.stdout and "usage:" not in text.stdout
    shown = json.loads(as_json.stdout)
    assert shown["worker_answered"] is False
    assert (shown["status"], shown["task"], shown["model"]) == (
        "waiting",
        "publish the report",
        "scripted:ask-first",
    )
    temporal = shown["temporal"]
    assert (temporal["waiting_for"], temporal["closed"]) == ("approval", None)
    assert temporal["started"] and temporal["wait_expires_at"]
    assert retrying_text.code == 0
    assert "task: hello" in retrying_text.stdout.splitlines()
    assert any(
        re.fullmatch(r"pending activity: call_model \(attempt \d+, [a-z ]+\)", line)
        for line in retrying_text.stdout.splitlines()
    ), retrying_text.stdout
    assert any(
        line.startswith("model call retrying: ") for line in retrying_text.stdout.splitlines()
    )


# --- A reader that goes away ----------------------------------------------------------------------


async def test_a_reader_that_goes_away_ends_the_cli_quietly(cli: Cli) -> None:
    # As `starter.py list | head -1` once head has its line: the pipe's reader is gone before
    # the CLI writes.
    read, write = os.pipe()
    os.close(read)
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "starter.py", "list", cwd=ROOT, env=cli.env,
            stdout=write, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    finally:
        os.close(write)
    async with asyncio.timeout(PATIENCE):
        _, stderr = await process.communicate()

    assert (process.returncode, stderr.decode()) == (141, "")


@pytest.mark.subprocess
@pytest.mark.parametrize("command", [["status", "run-1"], ["run", "hello"], ["pending"]])
async def test_a_malformed_variable_only_a_worker_reads_stops_no_command(
    closed_port: int, command: list[str]
) -> None:
    address = f"127.0.0.1:{closed_port}"
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "WAITSTATE_MODEL_CALLS_PER_SECOND": "fast"}

    done = await Cli(env)(*command)

    # It went on to what the command does: reach Temporal, which is not there.
    assert_refused(done, f"error: cannot reach Temporal at {address}: ")
    assert _one_error_line(done)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("variable", "value"),
    [("GATEWAY_PORT", "gateway"), ("WAITSTATE_MODEL", "openai:")],
)
async def test_a_malformed_variable_the_cli_reads_is_one_line_naming_it(
    closed_port: int, variable: str, value: str
) -> None:
    env = {**os.environ, "TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}", variable: value}

    done = await Cli(env)("status", "run-1")

    assert_refused(done, variable)
    assert _one_error_line(done).startswith(f"error: {variable}")


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (["run", "hello", "--wiat"], "run"),
        (["approve", "run-1", "--reqest", "apr-1"], "approve"),
        (["--wiat", "status", "run-1"], "status"),
        (["status"], "status"),
        (["nosuch"], ""),
    ],
)
async def test_a_mistyped_command_or_flag_is_one_line_pointing_at_its_usage(
    closed_port: int, args: list[str], usage: str
) -> None:
    cli = Cli({**os.environ, "TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}"})

    done = await cli(*args)

    assert (done.code, done.stdout) == (2, "")
    help_command = " ".join(part for part in (CLI_COMMAND, usage, "--help") if part)
    assert _one_error_line(done).endswith(f" (usage: {help_command})")
    mistyped = next((arg for arg in args if arg.startswith("--")), None)
    if mistyped is not None:
        assert mistyped in done.stderr


CLUSTER_WIDE = ["replay-check", "versions"]


@pytest.mark.parametrize("command", CLUSTER_WIDE)
@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--query", "WorkflowId = "], "error: the query is refused: "),
        (["--query", "NoSuchAttribute = 'x'"], "error: the query is refused: "),
        (["--limit", "0"], "argument --limit: must be 1 or more, got 0"),
    ],
)
async def test_the_cluster_wide_commands_refuse_a_bad_query_or_limit(
    cli: Cli, command: str, args: list[str], error: str
) -> None:
    assert_refused(await cli(command, *args), error)


@pytest.mark.parametrize("command", CLUSTER_WIDE)
async def test_the_cluster_wide_commands_say_an_unreachable_cluster_is_exit_2(
    cli: Cli, closed_port: int, command: str
) -> None:
    cli.env["TEMPORAL_ADDRESS"] = f"127.0.0.1:{closed_port}"

    done = await cli(command)

    assert_refused(done, "error: cannot reach Temporal at ")
    assert done.stderr.startswith("error: cannot reach Temporal at ")


async def test_status_shows_a_runs_tree_node_by_node(
    cli: Cli, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    apps = load_apps(["tests.workflows.tree_app:app"])
    async with make_worker(dev_env.client, task_queue, apps=apps):
        started = await client.start(RunInput(task="deep fan=2", agent="deep-lead"))
        await client.outcome(started.run_id)
        nodes = await eventually(
            lambda: _listed(client, started.run_id, 7), "the tree's nodes in the list view"
        )
        status = await cli("status", started.run_id)
        as_json = json.loads((await cli("status", started.run_id, "--json")).stdout)

    assert len(nodes) == 7
    assert status.code == 0, status.stderr
    assert "sub-agents (6, below this run):" in status.stdout
    lines = status.stdout.splitlines()
    start = lines.index("sub-agents (6, below this run):")
    assert [line.split(";")[0] for line in lines[start + 1 : start + 7]] == [
        "  team-1 [team] completed",
        "    researcher-1 [researcher] completed",
        "    researcher-2 [researcher] completed",
        "  team-2 [team] completed",
        "    researcher-1 [researcher] completed",
        "    researcher-2 [researcher] completed",
    ]
    assert [node["path"] for node in as_json["nodes"]] == [n.path for n in nodes[1:]]


async def test_status_of_a_fork_names_its_origin_and_how_its_calls_were_answered(
    cli: Cli, dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    async with make_worker(dev_env.client, task_queue, apps=load_apps([FORK_APP])):
        started = await client.start(RunInput(task="serve customer=ov", agent="shop"))
        await client.outcome(started.run_id)
        fork_id, _ = await client.fork(started.run_id, at=1, model="scripted:shop-more")
        await client.outcome(fork_id)
        status = await cli("status", fork_id)

    assert status.code == 0, status.stderr
    assert (
        f"fork of {started.run_id} (its first 1 turns; policy recorded): calls answered 0 from "
        "the recording, 0 by stubs, 0 live; 1 unavailable"
    ) in status.stdout
    assert 'unavailable: charge {"customer": "ov", "amount": 20}' in status.stdout


async def _listed(client: WaitstateClient, run_id: str, count: int) -> list[Any] | None:
    nodes = await client.tree(run_id)
    return nodes if len(nodes) == count else None


@pytest.mark.subprocess
async def test_a_tree_followed_by_run_wait_shows_its_nodes_and_approves_what_they_ask(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    app = "tests.workflows.tree_app:app"
    cli = Cli(process_env(dev_env.client, task_queue, WAITSTATE_APPS=app))
    async with make_worker(dev_env.client, task_queue, apps=load_apps([app])):
        done = await cli(
            "run", "ask fan=2", "--agent", "asking-lead", "--wait", "--auto-approve-after", "0.2"
        )

    assert done.code == 0, done.stdout + done.stderr
    for node in ("asker-1", "asker-2"):
        assert f"sub-agent {node} [asker]: waiting for approval" in done.stdout
        assert f"sub-agent {node} [asker]: completed" in done.stdout
    assert done.stdout.count("auto-approved request") == 2
    answer = next(line for line in done.stdout.splitlines() if line.startswith("answer: "))
    assert answer.count('"approval":"approved"') == 2, answer
