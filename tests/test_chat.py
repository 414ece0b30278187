"""`starter.py chat` as people run it: a conversation with a thread, in a subprocess against the
real dev server and a real worker serving the threads' app (its `chat-echo` script answers each
message with `re: <it> (<n> seen)`); and `status` of a thread, listing its messages."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from contextlib import AbstractAsyncContextManager
from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.helpers import eventually, make_worker, process_env, start_run
from tests.test_starter import HOSTILE, PATIENCE, RAW_CONTROL, SHOWN, Cli, Done, assert_refused
from tests.tiers import SUBPROCESS, needs
from waitstate.apps import load_apps
from waitstate.client import THREAD_TASK, WaitstateClient, thread_input
from waitstate.names import THREAD_ID
from waitstate.schemas import RunInput
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.threads import MAX_KEY_CHARS, ThreadSettings

APP = "tests.workflows.threads_app:app"
CHAT_MODEL = "scripted:chat-echo"
USAGE = re.compile(r"usage: 1 model call, \d+ input \+ \d+ output tokens?")


@pytest.fixture
@needs(SUBPROCESS)
def cli(dev_env: WorkflowEnvironment, task_queue: str) -> Cli:
    """The CLI, checking names against the threads' app, whose echo is its default model."""
    env = process_env(dev_env.client, task_queue, WAITSTATE_APPS=APP, WAITSTATE_MODEL=CHAT_MODEL)
    return Cli(env)


@pytest.fixture
def client(dev_env: WorkflowEnvironment, task_queue: str) -> WaitstateClient:
    return WaitstateClient(dev_env.client, task_queue=task_queue)


def _worker(env: WorkflowEnvironment, task_queue: str) -> AbstractAsyncContextManager[Worker]:
    """The production worker wiring, serving the threads' app."""
    return make_worker(env.client, task_queue, apps=load_apps([APP]))


def _thread_id() -> str:
    return f"thread-{uuid.uuid4().hex[:12]}"


def _sent(done: Done) -> tuple[str, str, list[str]]:
    """The thread id and the message line a `chat` printed first, and the lines after."""
    assert done.code == 0, done.stdout + done.stderr
    thread_line, message_line, *rest = done.stdout.splitlines()
    assert thread_line.startswith("thread "), done.stdout
    return thread_line.removeprefix("thread "), message_line, rest


async def test_a_conversation_through_the_cli_each_reply_awaited_and_status_lists_it(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    async with _worker(dev_env, task_queue):
        first = await cli("chat", "hello", "--wait")  # a new thread, of the default model
        thread_id, first_line, first_reply = _sent(first)
        second = await cli("chat", "--thread", thread_id, "how are you?", "--wait")
        third = await cli("chat", "--thread", thread_id, "bye", "--model", CHAT_MODEL, "--wait")
        status = await cli("status", thread_id)
        status_json = await cli("status", thread_id, "--json")

    assert re.fullmatch(r"thread-[0-9a-f]{12}", thread_id)
    assert first_line == "message m1 (queued, 0 ahead)"
    assert first_reply[0] == "reply: re: hello (1 seen)"
    assert USAGE.fullmatch(first_reply[1]), first_reply
    # The model had the whole conversation, across the thread's runs.
    for done, said in [
        (second, ["message m2 (queued, 0 ahead)", "reply: re: how are you? (2 seen)"]),
        (third, ["message m3 (queued, 0 ahead)", "reply: re: bye (3 seen)"]),
    ]:
        assert _sent(done)[0] == thread_id
        assert done.stdout.splitlines()[1:3] == said
    # The thread's own model named again: nothing to say about it.
    assert [d.stderr for d in (first, second, third)] == ["", "", ""]

    assert status.code == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0] == f"run {thread_id}: waiting"
    assert f"task: {THREAD_TASK}" in lines
    start = lines.index(
        "thread: 3 messages received; busy policy queue; closes after 30 days with no message"
    )
    assert lines[start + 1 : start + 4] == [
        "  m1 replied: hello -> re: hello (1 seen)",
        "  m2 replied: how are you? -> re: how are you? (2 seen)",
        "  m3 replied: bye -> re: bye (3 seen)",
    ]
    thread = json.loads(status_json.stdout)["thread"]
    assert thread["received"] == 3
    assert [(m["message_id"], m["status"], m["reply"]) for m in thread["messages"]] == [
        ("m1", "replied", "re: hello (1 seen)"),
        ("m2", "replied", "re: how are you? (2 seen)"),
        ("m3", "replied", "re: bye (3 seen)"),
    ]


async def test_json_and_a_repeated_key_which_is_one_message(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, client: WaitstateClient
) -> None:
    thread_id = _thread_id()
    once_args = ("chat", "--thread", thread_id, "--key", "k-1", "once", "--wait", "--json")
    async with _worker(dev_env, task_queue):
        once = await cli(*once_args)
        # The same key again at once: the thread knows it.
        at_once = await cli("chat", "--thread", thread_id, "--key", "k-1", "once")
        # Another model named for a thread that has one: said, and the message sent anyway.
        other = await cli(
            "chat", "--thread", thread_id, "--model", "scripted:echo", "more", "--json"
        )
        sent = json.loads(other.stdout)
        more = await client.reply(thread_id, sent["message_id"])
        # The key again, after another message: the first send's message and its reply.
        again = await cli(*once_args)
        again_plain = await cli("chat", "--thread", thread_id, "--key", "k-1", "once")
        state = await client.query(thread_id)

    # A thread id that never ran starts a thread, and the CLI says so (a typo would otherwise
    # start one quietly).
    assert (once.code, once.stderr) == (
        0,
        f"thread {thread_id} is new: started it with this message\n",
    )
    replied = json.loads(once.stdout)
    usage = replied.pop("usage")
    assert replied == {
        "thread_id": thread_id,
        "message_id": "m1",
        "status": "replied",
        "ahead": 0,
        "duplicate": False,
        "started": True,
        "reply": "re: once (1 seen)",
        "model_calls": 1,
        "error": None,
    }
    assert usage["model_calls"] == 1
    assert (at_once.code, at_once.stdout.splitlines()[1]) == (0, "message m1 (already sent)")
    # The same key again: the first send's message and its reply, nothing sent twice.
    assert (again.code, again.stderr) == (0, "")
    assert json.loads(again.stdout) == {
        **replied,
        "usage": usage,
        "duplicate": True,
        "started": False,
    }
    assert (again_plain.code, again_plain.stderr) == (0, "")
    assert again_plain.stdout == f"thread {thread_id}\nmessage m1 (already sent)\n"
    assert other.code == 0
    assert other.stderr == (
        f"thread {thread_id} already runs with model {CHAT_MODEL}: --agent and --model choose "
        "a new thread's only\n"
    )
    assert sent == {
        "thread_id": thread_id,
        "message_id": "m2",
        "status": "queued",
        "ahead": 0,
        "duplicate": False,
        "started": False,
    }
    assert more.reply == "re: more (2 seen)"  # the thread's own model answered
    assert state.thread is not None and state.thread.received == 2


async def test_a_refused_message_says_why_and_which_refusal(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, client: WaitstateClient
) -> None:
    thread_id = _thread_id()
    # Both wait for a person's approval: a `reject` thread busy with its first message, and a
    # task run, open, that takes no message at all.
    asking = RunInput(
        task=THREAD_TASK,
        model="scripted:ask-first",
        tools=["request_approval"],
        thread=ThreadSettings(busy="reject"),
    )
    async with _worker(dev_env, task_queue):
        first = await client.send_message(thread_id, "publish the report", start=asking)
        task = await start_run(
            dev_env.client,
            task_queue,
            RunInput(task="publish", model="scripted:ask-first", tools=["request_approval"]),
        )
        [thread_request] = await eventually(
            lambda: client.open_requests(thread_id), "the thread's approval request", PATIENCE
        )
        [task_request] = await eventually(
            lambda: client.open_requests(task.id), "the task run's approval request", PATIENCE
        )
        busy = await cli("chat", "--thread", thread_id, "and the summary?", "--wait")
        not_a_thread = await cli("chat", "--thread", task.id, "hello", "--json")
        status = await cli("status", thread_id)
        for run_id, request in ((thread_id, thread_request), (task.id, task_request)):
            await client.decide(
                run_id, DecideInput(request_id=request.request_id, decision="approve")
            )
        reply = await client.reply(thread_id, first.accepted.message_id)
        outcome = await asyncio.wait_for(task.result(), PATIENCE)
        state = await client.query(thread_id)

    assert busy.code == 1 and busy.stdout == ""
    assert busy.stderr == (
        f"error: thread {thread_id} refused the message (thread_busy): the agent is busy with "
        "message m1 and its policy is `reject`: send again once it has replied\n"
    )
    assert not_a_thread.code == 1 and not_a_thread.stdout == ""
    assert not_a_thread.stderr == (
        f"error: thread {task.id} refused the message (not_a_thread): this run is a task, not a "
        "thread: it takes no messages\n"
    )
    assert "  m1 working: publish the report" in status.stdout.splitlines()
    # Nothing was recorded of either refused message.
    assert reply.status == "replied"
    assert state.thread is not None and state.thread.received == 1
    assert outcome.status == "completed"


async def test_a_closed_thread_refuses_a_message_saying_it_is_closed(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, client: WaitstateClient
) -> None:
    thread_id = _thread_id()
    start = thread_input(
        model=CHAT_MODEL, settings=ThreadSettings(close_after=timedelta(seconds=1))
    )
    async with _worker(dev_env, task_queue):
        sent = await client.send_message(thread_id, "hello", start=start)
        await client.reply(thread_id, sent.accepted.message_id)
        await asyncio.wait_for(client.handle(thread_id).result(), PATIENCE)
        closed = await cli("chat", "--thread", thread_id, "still there?", "--wait")

    assert (closed.code, closed.stdout) == (1, "")
    assert closed.stderr == (
        f"error: thread {thread_id} is closed: start a new thread for a new message\n"
    )


async def test_a_message_that_ends_without_a_reply_exits_1_with_its_error(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    thread_id = _thread_id()
    # The CLI knows the echo script; this worker does not: each model call fails at once.
    async with make_worker(dev_env.client, task_queue):
        failed = await cli("chat", "--thread", thread_id, "hello", "--wait")
        failed_json = await cli("chat", "--thread", thread_id, "again", "--wait", "--json")

    assert failed.code == 1, failed.stderr
    lines = failed.stdout.splitlines()
    assert lines[:2] == [f"thread {thread_id}", "message m1 (queued, 0 ahead)"]
    assert lines[2].startswith("message m1 failed: model call failed on turn 1: ")
    assert "chat-echo" in lines[2]
    assert lines[3] == "usage: 0 model calls, 0 input + 0 output tokens"
    assert failed_json.code == 1
    outcome = json.loads(failed_json.stdout)
    assert (outcome["message_id"], outcome["status"], outcome["reply"]) == ("m2", "failed", None)
    assert outcome["error"].startswith("model call failed on turn 1: ")  # no call succeeded
    assert "no script named 'chat-echo'" in outcome["error"]


async def test_a_hostile_reply_is_shown_not_obeyed(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli
) -> None:
    async with _worker(dev_env, task_queue):
        chat = await cli("chat", HOSTILE, "--wait")
        thread_id = _sent(chat)[0]
        status = await cli("status", thread_id)

    for done in (chat, status):
        assert done.code == 0, done.stderr
        assert RAW_CONTROL.findall(done.stdout + done.stderr) == []
    # The reply keeps its lines, as a run's answer does, each shown.
    assert chat.stdout.splitlines()[2:4] == [
        f"reply: re: {SHOWN}",
        "run x: approved by admin (1 seen)",
    ]
    # In `status` each message stays on its own line.
    messages = [line for line in status.stdout.splitlines() if line.startswith("  m")]
    assert len(messages) == 1 and messages[0].startswith("  m1 replied: "), messages
    assert "run x: approved by admin" not in status.stdout.splitlines()


async def test_a_bad_message_or_thread_id_is_a_bad_argument(cli: Cli) -> None:
    for args, error in [
        (("",), "error: the message is empty: say something to the agent"),
        (("   ",), "error: the message is empty: say something to the agent"),
        (("hi", "--thread", ""), "error: --thread is empty: give a thread id"),
        (("hi", "--thread", "a\x1bb"), "has spaces around it or control characters in it"),
        (("hi", "--key", "k" * (MAX_KEY_CHARS + 1)), "error: not a valid message: key: "),
        (("hi", "--model", "scripted:nope"), "no script named 'nope'"),
        (("hi", "--agent", "a", "--model", CHAT_MODEL), "not allowed with argument"),
    ]:
        assert_refused(await cli("chat", *args), error)


async def test_list_finds_the_threads_by_their_search_attribute(
    dev_env: WorkflowEnvironment, task_queue: str, cli: Cli, client: WaitstateClient
) -> None:
    """A thread is started with `ThreadId` set to its id (the Web UI filters on it too:
    `ThreadId IS NOT NULL`); `list --threads` lists threads and no task; `list` marks them."""
    thread_id = _thread_id()
    async with _worker(dev_env, task_queue):
        sent = await client.send_message(thread_id, "hello", start=thread_input(model=CHAT_MODEL))
        await client.reply(thread_id, sent.accepted.message_id)
        task = await start_run(
            dev_env.client, task_queue, RunInput(task="plain", model="scripted:echo")
        )
        await task.result()

        async def listed() -> bool:
            done = await cli("list", "--threads", "--limit", "200", "--json")
            return thread_id in {run["run_id"] for run in json.loads(done.stdout)}

        await eventually(listed, "the thread in `list --threads`")
        threads = json.loads((await cli("list", "--threads", "--limit", "200", "--json")).stdout)
        everything = await cli("list", "--limit", "200")
        described = await dev_env.client.get_workflow_handle(thread_id).describe()

    assert all(run["thread"] for run in threads)
    assert task.id not in {run["run_id"] for run in threads}
    lines = {line.split()[0]: line for line in everything.stdout.splitlines()}
    assert " thread" in lines[thread_id] and " thread" not in lines[task.id]
    assert described.typed_search_attributes.get(THREAD_ID) == thread_id
