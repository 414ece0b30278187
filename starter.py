"""The waitstate CLI: start runs, follow them, approve or reject what they ask, answer their
operations' questions, inspect them.

python starter.py run "What is 17 * 23?" --wait
python starter.py run --agent report-builder "Build the Q3 report" --wait --json
python starter.py status RUN_ID --json
python starter.py list
python starter.py pending
python starter.py approve RUN_ID [--request REQ] [--reviewer NAME] [--comment TEXT]
python starter.py reject RUN_ID --reason TEXT
python starter.py answer RUN_ID [--operation OP] [--question Q] --accept '{"region": "EMEA"}'
python starter.py answer RUN_ID [--question Q] --decline [--responder NAME]
python starter.py cancel RUN_ID
python starter.py cleanup [--retention 7d]                      # delete ended runs' blobs once
python starter.py cleanup --schedule [--every 24h] [--retention 7d]   # ... daily, by Temporal

Each command is rendering over `waitstate.client.WaitstateClient`, which does the work. Agent,
tool and model names are checked against the apps of `--app` and WAITSTATE_APPS (the demo app
when neither names one), or, where those are not importable here, by the worker.

Most of what it prints comes from outside (jobs' questions, reviewers' names, models' answers,
tools' errors): control characters in it are printed as escapes (`\\x1b`), never sent raw to the
terminal, and a field shown on one line stays on one line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, TextIO, cast

from pydantic import ValidationError

from waitstate.apps import AppError, Apps, app_refs, load_apps
from waitstate.cleanup import DEFAULT_EVERY, SCHEDULE_ID, parse_duration
from waitstate.client import (
    ANSWER_TIMEOUT,
    DECIDE_TIMEOUT,
    AnswerRefused,
    ClientError,
    DecisionRefused,
    NotAnswered,
    PendingQuestion,
    PendingRequest,
    Retry,
    RunEnded,
    TemporalFailed,
    Unanswered,
    Unreachable,
    Wait,
    WaitstateClient,
    fleet_report,
    new_run_id,
    started_with,
)
from waitstate.mcp import McpConfigError, parse_servers
from waitstate.providers.base import parse_model_spec
from waitstate.schemas import RunInput, RunState, Step
from waitstate.schemas.approvals import DecideInput, DecideOutcome
from waitstate.schemas.questions import AnswerInput, AnswerOutcome, InputRequest
from waitstate.settings import Settings, exit_process
from waitstate.tracing import SERVICE_STARTER, Tracing, run_span

# The apps the CLI checks names against when none is named: the demo's, from a checkout.
DEMO_APP = "examples.demo.app:app"
# The exit status when stdout's reader went away (`status | head -1`): SIGPIPE's, as a shell
# reports a process that signal ended.
READER_GONE = 141
# What a terminal would act on rather than show: C0 and C1 controls and DEL (escape sequences
# start with ESC or CSI), and the characters that reorder or hide text (bidi embeddings,
# overrides and isolates, line and paragraph separators). Tab and newline are kept by
# `_visible`; `_line` escapes newlines too.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_CONTROLS}]")
_CONTROL_OR_NEWLINE = re.compile(f"[{_CONTROLS}\n]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r"}


class CliError(Exception):
    """A one-line error for the user; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of `starter.py` and the `waitstate` console script."""
    sys.stdout = cast(TextIO, _VisibleText(sys.stdout))
    sys.stderr = cast(TextIO, _VisibleText(sys.stderr))
    args = _parser().parse_args(argv)
    settings = Settings.from_env()
    tracing = Tracing.from_settings(settings, SERVICE_STARTER)
    try:
        code = asyncio.run(args.command(args, settings, tracing))
    except CliError as err:
        print(f"error: {_line(str(err))}", file=sys.stderr)
        code = err.code
    except ClientError as err:
        print(f"error: {_line(str(err))}", file=sys.stderr)
        code = 2 if isinstance(err, Unreachable) else 1
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = _reader_gone()
    if tracing is not None:
        tracing.shutdown()
    try:
        sys.stdout.flush()  # a pipe's buffer is written here: its reader may be gone by now
    except BrokenPipeError:
        code = _reader_gone()
    exit_process(code)


class _VisibleText:
    """A text stream that writes what `_visible` shows: what the CLI prints comes largely from
    outside, and the terminal must show it, never act on it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(_visible(text))

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty...: the stream's own
        return getattr(self._stream, name)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _visible(text: str) -> str:
    """`text` with its control characters as escapes (ESC is `\\x1b`); tabs and newlines
    kept."""
    return _CONTROL.sub(_escape, text)


def _line(text: str) -> str:
    """`text` on one line: its newlines and control characters as escapes, so what came from
    outside cannot pass for lines of the CLI's own."""
    return _CONTROL_OR_NEWLINE.sub(_escape, text)


def _reader_gone() -> int:
    """Stdout's reader went away (`status | head -1`): say nothing more, and exit as a
    process that SIGPIPE ended."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # what is still buffered goes nowhere, quietly
    os.close(devnull)
    return READER_GONE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="waitstate", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="start an agent run")
    run.add_argument("task", help="what the agent should do")
    run.add_argument("--agent", help="the agent to run (its definition sets what is not given)")
    run.add_argument("--id", help="run id; starting an id that exists returns that run")
    run.add_argument(
        "--model",
        help="provider:model (default: the agent's, else $WAITSTATE_MODEL or scripted:demo)",
    )
    run.add_argument(
        "--tools",
        nargs="+",
        metavar="TOOL",
        help="tools the run may use (default: the agent's, else every tool of the apps)",
    )
    run.add_argument(
        "--max-turns", type=int, help="model calls before stopping (default: the agent's, or 12)"
    )
    run.add_argument("--system-prompt", help="replace the agent's (or the default) system prompt")
    run.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="an app whose names to check against (repeatable; with WAITSTATE_APPS)",
    )
    run.add_argument("--wait", action="store_true", help="follow the run until it ends")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument(
        "--auto-approve-after",
        type=float,
        metavar="SECONDS",
        help="with --wait: approve each request after this long (demos, unattended)",
    )
    run.set_defaults(command=cmd_run)

    status = sub.add_parser("status", help="where a run is")
    status.add_argument("run_id")
    status.add_argument("--json", action="store_true")
    status.set_defaults(command=cmd_status)

    ops = sub.add_parser("ops", help="the fleet at a glance: waits, overdue waits, failures")
    ops.add_argument("--json", action="store_true")
    ops.set_defaults(command=cmd_ops)

    watch = sub.add_parser("watch", help="follow one run live until it ends")
    watch.add_argument("run_id")
    watch.set_defaults(command=cmd_watch)

    listing = sub.add_parser("list", help="recent runs")
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(command=cmd_list)

    pending = sub.add_parser("pending", help="runs waiting for a person's decision or answer")
    pending.add_argument("--json", action="store_true")
    pending.set_defaults(command=cmd_pending)

    for name in ("approve", "reject"):
        decide = sub.add_parser(name, help=f"{name} a run's approval request")
        decide.add_argument("run_id")
        decide.add_argument("--request", help="request id (default: the run's one open request)")
        decide.add_argument("--reviewer", default=os.environ.get("USER") or "cli")
        if name == "approve":
            decide.add_argument("--comment", default="")
        else:
            decide.add_argument("--reason", required=True, help="why; the agent reads it")
        decide.set_defaults(command=cmd_decide, decision=name)

    answer = sub.add_parser("answer", help="answer a question a run's operation asks")
    answer.add_argument("run_id")
    answer.add_argument(
        "--operation", help="the operation whose open question to answer (default: any)"
    )
    answer.add_argument(
        "--question", help="question id (default: the run's, or the operation's, one open question)"
    )
    action = answer.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--accept",
        type=_json_object,
        metavar="JSON",
        help="the answer: a JSON object matching the question's requested_schema",
    )
    action.add_argument("--decline", action="store_true", help="refuse to answer")
    answer.add_argument("--responder", default=os.environ.get("USER") or "cli")
    answer.set_defaults(command=cmd_answer)

    cancel = sub.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run_id")
    cancel.set_defaults(command=cmd_cancel)

    cleanup = sub.add_parser(
        "cleanup", help="delete the blobs of runs that ended more than a retention ago"
    )
    cleanup.add_argument(
        "--retention",
        type=_duration,
        metavar="DURATION",
        help="keep a run's blobs this long after it ends, e.g. 7d (default: the namespace's "
        "workflow retention)",
    )
    cleanup.add_argument(
        "--schedule",
        action="store_true",
        help=f"create or update the Temporal Schedule {SCHEDULE_ID!r} instead of running once",
    )
    cleanup.add_argument(
        "--every",
        type=_duration,
        default=DEFAULT_EVERY,
        metavar="DURATION",
        help="with --schedule: how often it runs, e.g. 24h (default: 24h)",
    )
    cleanup.add_argument("--json", action="store_true")
    cleanup.set_defaults(command=cmd_cleanup)
    return parser


async def cmd_run(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Start a run (or find the one with that id), then optionally follow it to the end."""
    run_id = _run_id(args.id)
    run_input = await _run_input(args, settings)
    client = await WaitstateClient.connect(settings, tracing=tracing)
    # The root of the run's trace: from its start to its answer, when the CLI waits for it.
    with run_span(tracing, run_id, run_input.agent, run_input.model):
        return await _start_and_follow(args, settings, client, run_input, run_id)


async def _start_and_follow(
    args: argparse.Namespace,
    settings: Settings,
    client: WaitstateClient,
    run_input: RunInput,
    run_id: str,
) -> int:
    """`cmd_run` from the start of the run on."""
    started = await client.start(run_input, run_id=run_id)
    url = settings.run_url(run_id)
    if started.existing:
        await _check_existing(client, run_id, run_input)
        if not args.json:
            following = "; following it" if args.wait else ""
            print(
                f"run {run_id} already exists, with this task: not starting another{following}",
                file=sys.stderr,
            )
    if not args.wait:
        if args.json:
            _print_json({"run_id": run_id, "existing": started.existing, "url": url})
        else:
            print(f"run {run_id}\nweb ui: {url}")
        return 0
    if not args.json:
        given = "; ".join(f"{label} {value}" for label, value in started_with(run_input))
        print(f"run {run_id} ({given})")
        print(f"web ui: {url}")
    state = await _follow(
        client, run_id, quiet=args.json, auto_approve_after=args.auto_approve_after
    )
    if args.json:
        _print_json(
            {
                "run_id": run_id,
                "existing": started.existing,
                **state.model_dump(mode="json", exclude={"steps"}),
                "output": _structured(state),
            }
        )
    else:
        _print_outcome(state)
        print(f"web ui: {url}")
    return 0 if state.status in ("completed", "max_turns") else 1


async def cmd_status(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Print a run's state."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    status = await client.status(args.run_id)
    state = status.state
    if args.json:
        retrying = [dataclasses.asdict(retry) for retry in status.retrying]
        _print_json(
            {
                "run_id": args.run_id,
                **state.model_dump(mode="json"),
                "retrying": retrying,
                "worker_answered": status.unanswered is None,
                "temporal": _unanswered_json(status.unanswered),
            }
        )
        return 0
    print(f"run {args.run_id}: {state.status}")
    for retry in status.retrying:
        print(_retry_line(retry))
    if status.unanswered is not None:
        _print_unanswered(status.unanswered, state)
        print(f"web ui: {settings.run_url(args.run_id)}")
        return 0
    if state.agent is not None:
        print(f"agent: {state.agent}")
    print(f"task: {state.task}")
    print(f"model: {state.model}; turns {state.turns}; tool calls {state.tool_calls}")
    print(_usage_line(state))
    if state.constraints:
        print(f"constraints: {_line('; '.join(state.constraints))}")
    if state.completed:
        print("completed:")
        for line in state.completed[-20:]:
            print(f"  - {_line(line)}")
    pending = [op for op in state.operations.values() if not op.terminal]
    for op in pending:
        progress = f", progress: {_line(op.progress)}" if op.progress else ""
        print(
            f"pending operation: {op.operation_id} {op.tool} job {op.job_id} ({op.status}, "
            f"{op.completion}), expires {op.expires_at.isoformat()}{progress}"
        )
    for request in state.approvals.values():
        if request.open:
            print(
                f"open approval: {request.request_id} for {request.tool} "
                f"({_line(request.reason)}), expires {request.expires_at.isoformat()}"
            )
    for question in state.questions.values():
        if question.open:
            who = "the model" if question.policy.answered_by == "model" else "a person"
            print(
                f"open question: {question.question_id} of {question.operation_id} "
                f"({question.tool}), for {who}: {_line(question.message)}; "
                f"expires {question.expires_at.isoformat()}"
            )
    if state.checkpoint is not None:
        checkpoint = state.checkpoint
        print(f"checkpoint ({checkpoint.at.isoformat()}, before {checkpoint.waiting_for}):")
        print(f"  done: {checkpoint.done}")
        print(f"  remaining: {checkpoint.remaining}")
    if state.context_rebuilds or state.continued_as_new:
        print(
            f"context rebuilt {state.context_rebuilds} times; "
            f"continued as new {state.continued_as_new} times"
        )
    print("steps:")
    for step in state.steps:
        print(_step_line(step))
    if state.final_output is not None:
        print(f"answer: {state.final_output}")
    _print_rejected(state)
    if state.error:
        print(f"error: {_line(state.error)}")
    print(f"web ui: {settings.run_url(args.run_id)}")
    return 0


async def cmd_list(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Print recent runs, newest first."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    runs = await client.list_runs(limit=args.limit)
    if args.json:
        _print_json(
            [
                {
                    "run_id": run.run_id,
                    "status": run.status,
                    "agent": run.agent,
                    "started": run.started.isoformat(),
                    "closed": run.closed.isoformat() if run.closed else None,
                }
                for run in runs
            ]
        )
        return 0
    if not runs:
        print("no runs")
    for run in runs:
        agent = f" agent {run.agent}" if run.agent else ""
        print(f"{run.run_id:<36} {run.status:<10} started {run.started.isoformat()}{agent}")
    return 0


async def cmd_pending(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Print runs waiting for a person, with their open requests and questions."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    pending = await client.waiting_for_people()
    if args.json:
        _print_json(
            [_approval_json(row) for row in pending.approvals]
            + [_question_json(row) for row in pending.questions]
        )
        return 0
    if not pending.approvals and not pending.questions:
        print("no run is waiting for a decision or an answer")
    for row in pending.approvals:
        request = row.request
        print(
            f"{row.run_id}  request {request.request_id}  expires {request.expires_at.isoformat()}"
        )
        print(f"    {_line(request.reason)}")
        print(f"    python starter.py approve {row.run_id} --request {request.request_id}")
    for asked in pending.questions:
        question = asked.question
        print(
            f"{asked.run_id}  question {question.question_id}  operation {question.operation_id} "
            f"({question.tool})  expires {question.expires_at.isoformat()}"
        )
        for line in _how_to_answer(asked.run_id, question):
            print(f"    {line}")
    return 0


async def cmd_decide(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Approve or reject a run's request (the run's one open request unless --request), and
    say what the run did with it: applied, or refused and why."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    request_id = args.request or await _one_open_request(client, args.run_id)
    decision = DecideInput(
        request_id=request_id,
        decision=args.decision,
        reviewer=args.reviewer,
        comment=args.comment if args.decision == "approve" else args.reason,
    )
    outcome = await _decide(client, args.run_id, decision)
    print(f"request {request_id} of run {args.run_id}: {outcome.status} by {args.reviewer}")
    return 0


async def cmd_answer(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Answer an operation's question (the run's one open question, of --operation if given,
    unless --question), and say what became of it: the job has it, it did not take it, or the
    run refused it and why."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    question = await _open_question(client, args.run_id, args.question, args.operation)
    question_id = question.question_id if question else args.question
    answer = AnswerInput(
        question_id=question_id,
        action="decline" if args.decline else "accept",
        content=args.accept,
        responder=args.responder,
    )
    outcome = await _answer(client, args.run_id, answer)
    of = f" (operation {question.operation_id})" if question else ""
    said = f"question {question_id} of run {args.run_id}{of}: {outcome.status} by {args.responder}"
    if not outcome.delivered:
        print(f"{said}; the job did not take it: {_line(outcome.reason) or 'no reason given'}")
        return 1
    print(f"{said}; the job has it")
    return 0


async def cmd_ops(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """The fleet from visibility queries: runs by status and by what they wait for, the
    oldest wait, waits past their expiry (stuck: is a worker down?), recent failures."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    report = fleet_report(await client.fleet())
    failures = [
        {"run_id": failed.run_id, "status": failed.status, "closed": str(failed.closed)}
        for failed in report.recent_failures
    ]
    if args.json:
        _print_json(
            {
                "running_by_status": report.running_by_status,
                "waiting_for": report.waiting_for,
                "oldest_wait": _wait_json(report.oldest_wait) if report.oldest_wait else None,
                "overdue": [_wait_json(wait) for wait in report.overdue],
                "recent_failures": failures,
            }
        )
        return 0
    by_status, by_wait = report.running_by_status, report.waiting_for
    print("running:", ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "none")
    print("waiting for:", ", ".join(f"{n} {k}" for k, n in sorted(by_wait.items())) or "nothing")
    if (oldest := report.oldest_wait) is not None:
        print(
            f"oldest waiting run: {oldest.run_id} ({oldest.waiting_for}), "
            f"started {oldest.started.isoformat()}"
        )
    for wait in report.overdue:
        expires = wait.expires_at.isoformat() if wait.expires_at else None
        print(
            f"OVERDUE: {wait.run_id} waiting for {wait.waiting_for}, expired "
            f"{expires} and still open: is a worker running?"
        )
    for failure in failures[:10]:
        print(f"failed: {failure['run_id']} ({failure['status']}) at {failure['closed']}")
    return 0


async def cmd_watch(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Follow one run live (turns, tool calls, operations, approvals) until it ends."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    state = await _follow(client, args.run_id, quiet=False)
    _print_outcome(state)
    return 0 if state.status in ("completed", "max_turns") else 1


async def cmd_cancel(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Ask a run to cancel; the workflow cancels its in-flight work and ends `cancelled`."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    await client.cancel(args.run_id)
    print(f"cancellation requested for run {args.run_id}")
    return 0


async def cmd_cleanup(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Run the blob cleanup once and print what it did, or (--schedule) create or update the
    schedule that runs it."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    retention = "the namespace's retention" if args.retention is None else str(args.retention)
    if args.schedule:
        done = await client.schedule_blob_cleanup(every=args.every, retention=args.retention)
        if args.json:
            _print_json({"schedule": SCHEDULE_ID, "done": done, "every": str(args.every)})
            return 0
        print(
            f"schedule {SCHEDULE_ID} {done}: a blob cleanup every {args.every} on task queue "
            f"{settings.task_queue}, keeping blobs for {retention} after their runs end"
        )
        return 0
    result = await client.clean_blobs(retention=args.retention)
    if args.json:
        _print_json(result.model_dump(mode="json"))
        return 0
    print(
        f"examined {result.examined} blobs, deleted {result.deleted} "
        f"({result.bytes_deleted} bytes) of runs ended over {result.retention} ago"
    )
    print(
        f"kept: {result.kept_open} of open runs, {result.kept_recent} recent, "
        f"{result.unowned} unowned"
    )
    if result.restored:
        print(f"put back {result.restored} set aside by a cleanup that did not finish")
    return 0


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


async def _run_input(args: argparse.Namespace, settings: Settings) -> RunInput:
    """The run's input from the arguments, its names checked against the apps the CLI loads.

    A run of a named agent is checked here only against apps named by --app or WAITSTATE_APPS
    (the worker may serve others): without them the worker checks, and fails the run at once
    if a name is unknown. A run without an agent gets every tool of the apps (the demo's when
    none is named) unless --tools says otherwise.
    """
    if not args.task.strip():
        raise CliError("the task is empty: say what the agent should do", 2)
    if args.max_turns is not None and args.max_turns < 1:
        raise CliError("--max-turns must be at least 1", 2)
    refs = app_refs(args.app, settings.apps)
    apps = _apps(refs, settings)
    checked = apps if refs or not args.agent else None
    try:
        fields: dict[str, Any] = {"task": args.task}
        if args.agent:
            fields["agent"] = args.agent
            if checked is not None:
                checked.agent(args.agent)
        else:
            fields["model"] = settings.default_model
            fields["tools"] = [spec.name for spec in apps.tools] if apps is not None else []
        if args.model:
            fields["model"] = args.model
        if args.tools:
            fields["tools"] = args.tools
        if "model" in fields:
            _check_model(fields["model"], checked)
        if checked is not None and "tools" in fields:
            checked.check_tools(fields["tools"])
    except AppError as err:
        raise CliError(str(err), 2) from None
    finally:
        if apps is not None:
            await apps.aclose()
    if args.max_turns is not None:
        fields["max_turns"] = args.max_turns
    if args.system_prompt:
        fields["system_prompt"] = args.system_prompt
    try:
        return RunInput(**fields)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in err.errors()
        )
        raise CliError(f"not a valid run: {problems}", 2) from None


def _run_id(given: str | None) -> str:
    """`--id`'s value, checked, or a new id when it is not given.

    Raises:
        CliError: it is empty, has spaces around it, or control characters in it (code 2).
    """
    if given is None:
        return new_run_id()
    if not given.strip():
        raise CliError("--id is empty: give a run id, or leave --id out for a new one", 2)
    if given != given.strip() or _CONTROL_OR_NEWLINE.search(given):
        raise CliError(f"--id {given!r} has spaces around it or control characters in it", 2)
    return given


async def _check_existing(client: WaitstateClient, run_id: str, run_input: RunInput) -> None:
    """A run with this id exists already: following it is what the same command, repeated,
    means; under another task, its outcome would pass for this task's.

    Raises:
        CliError: the run was started with another task.
    """
    existing = await client.started_input(run_id)
    if existing is not None and existing.task != run_input.task:
        raise CliError(
            f"run {run_id} already exists, with another task ({_preview(existing.task)!r}): "
            f"not starting a new one; choose another --id (`status {run_id}` shows that run)"
        )


def _apps(refs: Sequence[str], settings: Settings) -> Apps | None:
    """The apps `refs` name (one that does not load is an error), or, when none is named, the
    demo app if it is importable here (a checkout), or None; with the MCP servers of
    WAITSTATE_MCP_SERVERS."""
    try:
        servers = parse_servers(settings.mcp_servers)
    except McpConfigError as err:
        raise CliError(str(err), 2) from None
    try:
        return load_apps(refs or [DEMO_APP], mcp_servers=servers)
    except AppError as err:
        if refs:
            raise CliError(str(err), 2) from None
        return None


def _check_model(spec: str, apps: Apps | None) -> None:
    if apps is not None:
        apps.check_model(spec)
        return
    try:
        parse_model_spec(spec)
    except ValueError as err:
        raise AppError(str(err)) from None


def _structured(state: RunState) -> Any:
    """A run's answer as JSON when it is JSON (an agent's structured output), else None."""
    if state.final_output is None:
        return None
    try:
        return json.loads(state.final_output)
    except ValueError:
        return None


async def _one_open_request(client: WaitstateClient, run_id: str) -> str:
    """The id of the run's one open approval request.

    Raises:
        CliError: no open request or several, or no worker to ask.
        ClientError: unknown or ended run.
    """
    try:
        requests = await client.open_requests(run_id)
    except NotAnswered as err:
        raise CliError(
            f"could not ask run {run_id} for its open requests ({err.reason}): "
            "is a worker running? Name the request with --request"
        ) from err
    if not requests:
        raise CliError(f"run {run_id} has no open approval request")
    if len(requests) > 1:
        listing = "; ".join(f"{r.request_id} ({r.reason})" for r in requests)
        raise CliError(
            f"run {run_id} has several open requests; pick one with --request: {listing}"
        )
    return requests[0].request_id


async def _open_question(
    client: WaitstateClient, run_id: str, question_id: str | None, operation_id: str | None
) -> InputRequest | None:
    """The open question to answer: `question_id`'s, else the run's one open question for a
    person (of `operation_id` if given).

    Returns None when `question_id` is named but is not among the open questions, or the run
    could not be asked: the answer is sent anyway, and the run says why it refuses it.

    Raises:
        CliError: no open question or several, no worker to ask, the run has ended, or
            `question_id` is of another operation than `operation_id`.
        ClientError: unknown run.
    """
    try:
        questions = await client.open_questions(run_id)
    except RunEnded as err:
        how = f" ({err.status})" if err.status else ""
        raise CliError(f"run {run_id} has already ended{how}: answer not applied") from err
    except NotAnswered as err:
        if question_id is not None:
            return None
        raise CliError(
            f"could not ask run {run_id} for its open questions ({err.reason}): "
            "is a worker running? Name the question with --question"
        ) from err
    if question_id is not None:
        question = next((q for q in questions if q.question_id == question_id), None)
        if question is not None and operation_id not in (None, question.operation_id):
            raise CliError(
                f"question {question_id} of run {run_id} is of operation "
                f"{question.operation_id}, not {operation_id}"
            )
        return question
    of = ""
    if operation_id is not None:
        questions = [q for q in questions if q.operation_id == operation_id]
        of = f" of operation {operation_id}"
    if not questions:
        raise CliError(f"run {run_id} has no open question{of} for a person to answer")
    if len(questions) > 1:
        listing = "; ".join(
            f"{q.question_id} ({q.operation_id} {q.tool}: {_preview(q.message)})" for q in questions
        )
        raise CliError(
            f"run {run_id} has several open questions{of}; pick one with --question: {listing}"
        )
    return questions[0]


async def _answer(client: WaitstateClient, run_id: str, answer: AnswerInput) -> AnswerOutcome:
    """Send an answer and return what became of it (the job took it or not).

    Raises:
        CliError: the run refused it (unknown question, already closed, the model's to answer,
            content that does not match the question's schema, run ended) or did not answer in
            time, or did not apply it.
        ClientError: unknown run (code 1), Temporal unreachable (code 2).
    """
    try:
        outcome = await client.answer(run_id, answer)
    except AnswerRefused as err:
        raise CliError(f"answer refused by run {run_id}: {err.reason}") from err
    except TemporalFailed as err:
        raise CliError(f"answer refused by Temporal: {err.reason}") from err
    except RunEnded as err:
        raise CliError(f"run {run_id} has already ended: answer not applied") from err
    except NotAnswered as err:
        raise CliError(
            f"run {run_id} did not answer within {ANSWER_TIMEOUT.total_seconds():g} s (is a "
            "worker running, or the job's system slow to take the answer?); the answer may "
            f"still be applied: check with `status {run_id}`"
        ) from err
    if not outcome.accepted:
        raise CliError(f"answer not applied by run {run_id}: {outcome.reason or outcome.status}")
    return outcome


async def _decide(client: WaitstateClient, run_id: str, decision: DecideInput) -> DecideOutcome:
    """Send a decision and return what the run did with it.

    Raises:
        CliError: the run refused it (unknown request, already decided or expired, run ended)
            or did not answer in time, or did not apply it.
        ClientError: unknown run (code 1), Temporal unreachable (code 2).
    """
    verb = decision.decision
    try:
        outcome = await client.decide(run_id, decision)
    except DecisionRefused as err:
        raise CliError(f"{verb} refused by run {run_id}: {err.reason}") from err
    except TemporalFailed as err:
        # E.g. PERMISSION_DENIED: CLI decisions are authorised by namespace access.
        raise CliError(f"{verb} refused by Temporal: {err.reason}") from err
    except RunEnded as err:
        raise CliError(f"run {run_id} has already ended: {verb} not applied") from err
    except NotAnswered as err:
        raise CliError(
            f"run {run_id} did not answer within {DECIDE_TIMEOUT.total_seconds():g} s "
            f"(is a worker running?); the {verb} may still be applied when one runs: "
            f"check with `status {run_id}`"
        ) from err
    if not outcome.accepted:
        raise CliError(f"{verb} not applied by run {run_id}: {outcome.reason or outcome.status}")
    return outcome


async def _follow(
    client: WaitstateClient,
    run_id: str,
    *,
    quiet: bool,
    auto_approve_after: float | None = None,
) -> RunState:
    """Print each step as it happens until the run ends; return its final state."""
    seen: dict[str, float] = {}  # approval request id -> when it was first seen
    asked: set[str] = set()  # question ids shown
    reported: dict[str, str] = {}  # operation id -> the job's progress last shown
    async for progress in client.follow(run_id, retries=not quiet):
        if not quiet:
            for step in progress.steps:
                print(_step_line(step), flush=True)
            for retry in progress.retries:
                print(f"  {_retry_line(retry)}", flush=True)
            if progress.state is not None:
                _show_progress(progress.state, reported)
        if progress.state is not None:
            await _attend_approvals(client, run_id, progress.state, seen, quiet, auto_approve_after)
            if not quiet:
                _show_questions(run_id, progress.state, asked)
        if progress.outcome is not None:
            return progress.outcome
    raise AssertionError("follow ended without the run's outcome")


async def _attend_approvals(
    client: WaitstateClient,
    run_id: str,
    state: RunState,
    seen: dict[str, float],
    quiet: bool,
    auto_approve_after: float | None,
) -> None:
    """Show how to answer each new request; with --auto-approve-after, answer it."""
    now = asyncio.get_running_loop().time()
    for request in state.approvals.values():
        if not request.open:
            continue
        if request.request_id not in seen:
            seen[request.request_id] = now
            if not quiet:
                print(f"  waiting for approval: {_line(request.reason)}", flush=True)
                print(f"    python starter.py approve {run_id} --request {request.request_id}")
                print(
                    f"    python starter.py reject {run_id} --request {request.request_id} "
                    "--reason '...'",
                    flush=True,
                )
        elif (
            auto_approve_after is not None and now - seen[request.request_id] >= auto_approve_after
        ):
            seen[request.request_id] = float("inf")  # approve once
            decision = DecideInput(
                request_id=request.request_id, decision="approve", reviewer="auto-approve (demo)"
            )
            try:
                await _decide(client, run_id, decision)
            except (CliError, ClientError) as err:  # e.g. someone decided first: the run goes on
                print(f"  auto-approve: {err}", file=sys.stderr, flush=True)
            else:
                if not quiet:
                    print(f"  auto-approved request {request.request_id}", flush=True)


def _show_progress(state: RunState, shown: dict[str, str]) -> None:
    """Show each open operation's progress when its job reports something new."""
    for op in state.operations.values():
        if op.terminal or not op.progress or shown.get(op.operation_id) == op.progress:
            continue
        shown[op.operation_id] = op.progress
        print(f"  operation {op.operation_id} ({op.tool}): {_line(op.progress)}", flush=True)


def _show_questions(run_id: str, state: RunState, shown: set[str]) -> None:
    """Show each new open question for a person, and how to answer it (--auto-approve-after
    does not answer questions: what to answer is a person's to say)."""
    for question in state.questions.values():
        if not question.open or question.policy.answered_by != "person":
            continue
        if question.question_id not in shown:
            shown.add(question.question_id)
            print(f"  waiting for an answer ({question.operation_id} {question.tool}):")
            for line in _how_to_answer(run_id, question):
                print(f"    {line}", flush=True)


def _how_to_answer(run_id: str, question: InputRequest) -> list[str]:
    """A question's text and schema, and the commands that answer it."""
    command = f"python starter.py answer {run_id} --question {question.question_id}"
    schema = json.dumps(question.requested_schema, separators=(",", ":"))
    return [
        *question.message.splitlines(),
        f"answer schema: {schema}",
        f"{command} --accept '{{...}}'",
        f"{command} --decline",
    ]


def _json_object(text: str) -> dict[str, Any]:
    """`--accept`'s value: a JSON object (argparse reports what else it is as a usage error)."""
    try:
        value = json.loads(text, parse_constant=_not_a_number, parse_float=_finite)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f'a JSON object is needed ({{"field": ...}}), not {type(value).__name__}'
        )
    return value


def _not_a_number(name: str) -> float:
    # Python's JSON takes NaN and Infinity; Temporal's converter would store them as null.
    raise ValueError(f"{name} is not a JSON number (send a finite number, or a string)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a double's range (send it as a string)")
    return value


def _approval_json(row: PendingRequest) -> dict[str, Any]:
    return {
        "kind": "approval",
        "run_id": row.run_id,
        "request_id": row.request.request_id,
        "tool": row.request.tool,
        "reason": row.request.reason,
        "expires_at": row.request.expires_at.isoformat(),
        "escalated": row.request.escalated,
    }


def _question_json(row: PendingQuestion) -> dict[str, Any]:
    question = row.question
    return {
        "kind": "question",
        "run_id": row.run_id,
        "question_id": question.question_id,
        "operation_id": question.operation_id,
        "tool": question.tool,
        "message": question.message,
        "requested_schema": question.requested_schema,
        "expires_at": question.expires_at.isoformat(),
        "escalated": question.escalated,
    }


def _preview(text: str, limit: int = 60) -> str:
    """The start of a text, on one line."""
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 3]}..."


def _retry_line(retry: Retry) -> str:
    """E.g. `model call retrying: attempt 3 of 8, last error: openai: HTTP 500: ...`."""
    of = f" of {retry.maximum_attempts}" if retry.maximum_attempts else ""
    error = _line(retry.last_error)
    return f"{retry.call} retrying: attempt {retry.attempt}{of}, last error: {error}"


def _wait_json(wait: Wait) -> dict[str, Any]:
    return {
        "run_id": wait.run_id,
        "waiting_for": wait.waiting_for,
        "pending_operations": wait.pending_operations,
        "started": wait.started.isoformat(),
        "expires_at": wait.expires_at.isoformat() if wait.expires_at else None,
        "overdue": wait.overdue,
    }


def _step_line(step: Step) -> str:
    mark = " (error)" if step.is_error else ""
    return f"  turn {step.turn:<3} {step.kind:<5} {_line(step.name)}{mark}: {_line(step.detail)}"


def _print_unanswered(unanswered: Unanswered, state: RunState) -> None:
    """What Temporal alone knows of a run no worker answered for: what it was started with,
    when, and what it waits for, or how it ended."""
    print(
        f"no worker answered its status query ({_line(unanswered.reason)}): this is what "
        "Temporal alone knows"
    )
    if state.agent is not None:
        print(f"agent: {state.agent}")
    print(f"task: {_line(state.task) or '(unknown)'}")
    model = state.model or ("the agent's" if state.agent else "(unknown)")
    print(f"model: {model}")
    print(f"started: {_when(unanswered.started)}; ended: {_when(unanswered.closed)}")
    if unanswered.closed is not None:  # how it ended, from its history
        print(f"turns {state.turns}; tool calls {state.tool_calls}")
        print(_usage_line(state))
        if state.final_output is not None:
            print(f"answer: {state.final_output}")
        if state.error:
            print(f"error: {_line(state.error)}")
        return
    waiting = unanswered.waiting_for or "none"
    until = f", until {_when(unanswered.wait_expires_at)}" if unanswered.wait_expires_at else ""
    pending = unanswered.pending_operations or 0
    print(f"waiting for: {waiting}{until}; pending operations: {pending}")
    for activity in unanswered.pending_activities:
        print(f"pending activity: {activity}")


def _unanswered_json(unanswered: Unanswered | None) -> dict[str, Any] | None:
    if unanswered is None:
        return None
    return {
        "reason": unanswered.reason,
        "started": _when(unanswered.started, None),
        "closed": _when(unanswered.closed, None),
        "waiting_for": unanswered.waiting_for,
        "wait_expires_at": _when(unanswered.wait_expires_at, None),
        "pending_operations": unanswered.pending_operations,
        "pending_activities": unanswered.pending_activities,
    }


def _when(moment: datetime | None, absent: str | None = "-") -> str | None:
    return moment.isoformat() if moment is not None else absent


def _usage_line(state: RunState) -> str:
    usage = state.usage
    return (
        f"usage: {usage.model_calls} model calls, "
        f"{usage.input_tokens} input + {usage.output_tokens} output tokens"
    )


def _print_outcome(state: RunState) -> None:
    tokens = state.usage.input_tokens + state.usage.output_tokens
    print(
        f"{state.status} after {state.turns} turns, {state.tool_calls} tool calls, "
        f"{state.usage.model_calls} model calls, {tokens} tokens"
    )
    if state.final_output is not None:
        print(f"answer: {state.final_output}")
    _print_rejected(state)
    if state.error:
        print(f"error: {_line(state.error)}")


def _print_rejected(state: RunState) -> None:
    """The last answer the agent's output type refused, while no later one validated."""
    if (rejected := state.rejected_output) is not None:
        print(f"rejected answer (turn {rejected.turn}): {rejected.answer}")
        print(f"  why: {rejected.errors}")


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=None, default=str))


if __name__ == "__main__":
    main()
