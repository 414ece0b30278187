"""The command for threads: `chat` (send a message to a thread, starting the thread with it if
it never ran, and with `--wait` print the reply)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import ValidationError

from waitstate.cli.output import CliError, checked_id, invalid, one_line, print_json, tokens_line
from waitstate.cli.runs import _run_input
from waitstate.client import (
    REPLY_TIMEOUT,
    SEND_TIMEOUT,
    THREAD_TASK,
    MessageRefused,
    NotAnswered,
    OutcomeUnknown,
    RunNotFound,
    SentMessage,
    WaitstateClient,
    new_thread_id,
)
from waitstate.schemas import RunInput
from waitstate.schemas.threads import KEEP_MESSAGES, SendMessage, ThreadMessage, ThreadSettings
from waitstate.settings import Settings
from waitstate.tracing import Tracing
from waitstate.wording import count_of


async def cmd_chat(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Send a message to a thread (a new one unless --thread names one), and with --wait print
    its reply: exit 1 when the message ended without one (`max_turns`, `failed`)."""
    send = _message(args)
    thread_id = _thread_id(args.thread)
    start = await _thread_start(args, settings)
    client = await WaitstateClient.connect(settings, tracing=tracing)
    ran, existing = await _ran(client, args.thread)
    sent = await _send(client, thread_id, send, start)
    started = not ran and not sent.accepted.duplicate
    if args.thread is not None and started:
        # A thread id mistyped would otherwise start a thread quietly: say so.
        print(f"thread {thread_id} is new: started it with this message", file=sys.stderr)
    elif existing is not None and (args.agent or args.model):
        _check_existing(thread_id, existing, args)
    if not args.json:
        _print_sent(sent)
    if not args.wait:
        if args.json:
            print_json({**_sent_json(sent), "started": started})
        return 0
    message = await _reply(client, sent)
    if args.json:
        print_json(
            {
                **_sent_json(sent),
                "started": started,
                "status": message.status,
                "reply": message.reply,
                "usage": message.usage.model_dump(mode="json"),
                "model_calls": message.model_calls,
                "error": message.error,
            }
        )
    else:
        _print_reply(message)
    return 0 if message.status == "replied" else 1


def _message(args: argparse.Namespace) -> SendMessage:
    """The message to send, checked before anything is sent.

    Raises:
        CliError: it is empty, too long, or its --key or --sender is not valid (code 2).
    """
    if not args.message.strip():
        raise CliError("the message is empty: say something to the agent", 2)
    try:
        return SendMessage(text=args.message, key=args.key, sender=args.sender)
    except ValidationError as err:
        raise invalid("message", err) from None


def _thread_id(given: str | None) -> str:
    """`--thread`'s value, checked, or a new thread id when it is not given."""
    return checked_id(given, "--thread", new_thread_id, "a thread")


async def _thread_start(args: argparse.Namespace, settings: Settings) -> RunInput:
    """What the thread starts with if it never ran: the agent, model and tools `run` would
    choose from the same arguments (its names checked the same way), as a thread."""
    as_run = argparse.Namespace(
        task=args.message,
        agent=args.agent,
        model=args.model,
        app=args.app,
        tools=None,
        max_turns=None,
        system_prompt=None,
    )
    run_input = await _run_input(as_run, settings)
    return run_input.model_copy(update={"task": THREAD_TASK, "thread": ThreadSettings()})


async def _send(
    client: WaitstateClient, thread_id: str, send: SendMessage, start: RunInput
) -> SentMessage:
    """Send the message, starting the thread with `start` if it never ran.

    Raises:
        CliError: the thread refused the message (saying which refusal), did not take it for
            now, or did not answer (the key to send it again with: it is then one message).
        ClientError: the thread is closed (code 1), Temporal unreachable (code 2).
    """
    try:
        return await client.send_message(
            thread_id, send.text, key=send.key, sender=send.sender, start=start
        )
    except MessageRefused as err:
        code = f" ({err.code})" if err.code else ""
        raise CliError(f"thread {thread_id} refused the message{code}: {err.reason}") from err
    except OutcomeUnknown as err:
        raise CliError(
            f"thread {thread_id} did not answer within {SEND_TIMEOUT.total_seconds():g} s (is a "
            "worker running?); it may still take the message: send it again with "
            f"--thread {thread_id} --key {err.key} (it is taken once)"
        ) from err
    except NotAnswered as err:
        raise CliError(
            f"thread {thread_id} took no message ({err.reason}); nothing was recorded: send it "
            "again"
        ) from err


async def _ran(client: WaitstateClient, thread_id: str | None) -> tuple[bool, RunInput | None]:
    """Whether the thread `--thread` names ever ran (no id given: it did not), and what it was
    started with, if that can be read."""
    if thread_id is None:
        return False, None
    try:
        return True, await client.started_input(thread_id)
    except RunNotFound:
        return False, None


def _check_existing(thread_id: str, existing: RunInput, args: argparse.Namespace) -> None:
    """A thread that already ran keeps the agent or model it started with: say so when the
    command named another (the message is sent all the same)."""
    if args.agent:
        same = existing.agent == args.agent
    else:
        same = existing.agent is None and existing.model == args.model
    if same:
        return
    runs = f"agent {existing.agent}" if existing.agent else f"model {existing.model}"
    print(
        f"thread {thread_id} already runs with {runs}: --agent and --model choose a new "
        "thread's only",
        file=sys.stderr,
    )


async def _reply(client: WaitstateClient, sent: SentMessage) -> ThreadMessage:
    """The message once the thread has replied to it or ended it without a reply.

    Raises:
        CliError: no reply in time, no worker answering, or a duplicate's reply that the
            thread no longer keeps.
    """
    thread_id, message_id = sent.thread_id, sent.accepted.message_id
    try:
        if sent.accepted.duplicate and sent.accepted.status not in ("queued", "working"):
            # Answered already; `reply` would wait in vain for one the thread has forgotten.
            kept = await client.message(thread_id, message_id)
            if kept is None:
                raise CliError(
                    f"message {message_id} of thread {thread_id} was answered long ago: the "
                    f"thread keeps the replies of its last {KEEP_MESSAGES} messages only"
                )
            return kept
        return await client.reply(thread_id, message_id)
    except NotAnswered as err:
        why = f"thread {thread_id} did not answer ({err.reason}): is a worker running?"
    except TimeoutError:
        why = f"no reply within {REPLY_TIMEOUT.total_seconds():g} s"
    raise CliError(
        f"no reply to message {message_id} yet: {why}; the thread goes on: check with "
        f"`status {thread_id}`"
    )


def _print_sent(sent: SentMessage) -> None:
    accepted = sent.accepted
    where = "already sent" if accepted.duplicate else f"{accepted.status}, {accepted.ahead} ahead"
    print(f"thread {sent.thread_id}")
    print(f"message {accepted.message_id} ({where})")


def _print_reply(message: ThreadMessage) -> None:
    """The reply, its lines kept (each shown, its controls escaped) as a run's answer is; or
    how the message ended without one."""
    if message.status == "replied":
        print(f"reply: {message.reply}")
    else:
        print(f"message {message.message_id} {message.status}: {one_line(message.error or '')}")
    print(f"usage: {count_of(message.model_calls, 'model call')}, {tokens_line(message.usage)}")


def _sent_json(sent: SentMessage) -> dict[str, Any]:
    accepted = sent.accepted
    return {
        "thread_id": sent.thread_id,
        "message_id": accepted.message_id,
        "status": accepted.status,
        "ahead": accepted.ahead,
        "duplicate": accepted.duplicate,
    }
