"""The waitstate CLI: start runs, follow them, approve or reject what they ask, answer their
operations' questions, inspect them.

waitstate run "What is 17 * 23?" --wait
waitstate run --agent report-builder "Build the Q3 report" --wait --json
waitstate status RUN_ID --json
waitstate chat "Hello" --wait                            # a new thread: a conversation
waitstate chat --thread THREAD_ID "And in EUR?" --wait [--key KEY] [--json]
waitstate list
waitstate pending
waitstate approve RUN_ID [--request REQ] [--reviewer NAME] [--comment TEXT]
waitstate reject RUN_ID --reason TEXT
waitstate answer RUN_ID [--operation OP] [--question Q] --accept '{"region": "EMEA"}'
waitstate answer RUN_ID [--question Q] --decline [--responder NAME]
waitstate cancel RUN_ID
waitstate cleanup [--retention 7d]                      # delete ended runs' blobs once
waitstate cleanup --schedule [--every 24h] [--retention 7d]   # ... daily, by Temporal
waitstate replay-check [--closed-within 7d [--all-versions] | --query Q] [--limit N]   # before a deploy
waitstate versions [--query Q] [--limit N] [--json]   # open runs per patch and version
waitstate fork RUN_ID --at turn:N [--model SPEC] [--instructions TEXT | --agent NAME] [--wait]
waitstate eval (--query Q | --runs ID,...) [--model SPEC] [--threshold 0.9]   # exit 1 below it

This module is the entry point, and its parser the table of commands. The commands live in
`waitstate/cli/` by family (runs, threads, people, fleet, replay, versions, evals), each rendering over
`waitstate.client.WaitstateClient`, which does the work. Agent, tool and model names are checked
against the apps of `--app` and WAITSTATE_APPS (the demo app when neither names one), or, where
those are not importable here, by the worker.

Most of what it prints comes from outside (jobs' questions, reviewers' names, models' answers,
tools' errors): control characters in it are printed as escapes (`\\x1b`), never sent raw to the
terminal, and a field shown on one line stays on one line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO, cast

from waitstate.cleanup import DEFAULT_EVERY, SCHEDULE_ID
from waitstate.cli import evals
from waitstate.cli.fleet import cmd_cleanup, cmd_ops, duration
from waitstate.cli.output import CliError, VisibleText, one_line, reader_gone
from waitstate.cli.people import cmd_answer, cmd_decide, cmd_pending, json_object
from waitstate.cli.replay import DEFAULT_CLOSED_WITHIN, DEFAULT_LIMIT, cmd_replay_check, positive
from waitstate.cli.runs import cmd_cancel, cmd_list, cmd_run, cmd_status, cmd_watch
from waitstate.cli.threads import cmd_chat
from waitstate.cli.versions import DEFAULT_LIMIT as VERSIONS_LIMIT
from waitstate.cli.versions import cmd_versions
from waitstate.client import REPLY_TIMEOUT, ClientError, Unreachable
from waitstate.deployment import build_id
from waitstate.names import cli_command
from waitstate.settings import Settings, exit_process
from waitstate.tracing import SERVICE_STARTER, Tracing
from waitstate.workflows.served import WORKFLOWS
from waitstate.workflows.versions import MARKERS

PROG = "waitstate"


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of `starter.py` and the `waitstate` console script."""
    sys.stdout = cast(TextIO, VisibleText(sys.stdout))
    sys.stderr = cast(TextIO, VisibleText(sys.stderr))
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # a mistyped flag: the command's parser says so, pointing at its own help
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        # What only a worker reads is left unread: the CLI runs none.
        settings = Settings.from_env(worker=False)
    except ValueError as err:  # a malformed variable, named in one line
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        exit_process(2)
    tracing = Tracing.from_settings(settings, SERVICE_STARTER)
    try:
        code = asyncio.run(args.command(args, settings, tracing))
    except CliError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        code = err.code
    except ClientError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        code = exit_code(err)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = reader_gone()
    if tracing is not None:
        tracing.shutdown()
    try:
        sys.stdout.flush()  # a pipe's buffer is written here: its reader may be gone by now
    except BrokenPipeError:
        code = reader_gone()
    exit_process(code)


def exit_code(err: ClientError) -> int:
    """The CLI's exit status for what the client raised: the one place it is decided (a
    command may word the message with what it knows, never the status). 2: Temporal could not
    be reached (nothing was sent; as a usage error, the command can go again unchanged once it
    is up); 1: anything else the client refused or could not do."""
    return 2 if isinstance(err, Unreachable) else 1


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its commands' too), whose usage errors are one line, as every error of
    the CLI is, ending with the command that shows the usage (argparse's: the usage, then the
    error, on two lines or more)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix(PROG).strip()
        usage = " ".join(part for part in (cli_command(), command, "--help") if part)
        print(f"error: {one_line(message)} (usage: {usage})", file=sys.stderr)
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__.split("\n")[0])
    parser.set_defaults(parser=parser)
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
        "--budget-tokens",
        type=int,
        metavar="N",
        help="the most tokens its model calls may take (replaces the agent's budget)",
    )
    run.add_argument(
        "--on-exceed",
        choices=["stop", "approve", "degrade"],
        default="stop",
        help="with --budget-tokens: stop, ask a person to raise it, or go on with --degrade-to",
    )
    run.add_argument(
        "--degrade-to", metavar="MODEL", help="with --on-exceed degrade: the cheaper model"
    )
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

    chat = sub.add_parser(
        "chat",
        help="send a message to a thread (a conversation with an agent), and with --wait "
        "print the reply",
        description="Sends the message to the thread --thread names, or to a new thread. A "
        "thread that never ran starts with its first message (as --agent's, or with --model), "
        "and says so on stderr; one that ran keeps its agent and model; a closed one refuses "
        "every message. Prints the thread and message ids and where the message stands. With "
        "--wait, also the reply, and exit 1 when the message ended without one (max_turns, "
        "failed). With --json, one object: thread_id, message_id, status, ahead, duplicate, "
        "started (with --wait: status is how the message ended, and reply, usage, model_calls "
        "and error).",
    )
    chat.add_argument("message", help="what to say")
    chat.add_argument(
        "--thread",
        metavar="ID",
        help="the thread to send to, started with this message if it never ran (default: a "
        "new thread)",
    )
    starts_as = chat.add_mutually_exclusive_group()
    starts_as.add_argument("--agent", help="a new thread's agent (its definition sets the rest)")
    starts_as.add_argument(
        "--model", help="a new thread's provider:model (default: $WAITSTATE_MODEL or scripted:demo)"
    )
    chat.add_argument(
        "--key",
        help="idempotency key: a send repeated with the same key is the same message, sent once",
    )
    chat.add_argument(
        "--sender", default=os.environ.get("USER") or "cli", help="who says it (default: $USER)"
    )
    chat.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="an app whose names to check against (repeatable; with WAITSTATE_APPS)",
    )
    chat.add_argument(
        "--wait",
        action="store_true",
        help=f"wait for the reply (at most {REPLY_TIMEOUT.total_seconds():g} s)",
    )
    chat.add_argument("--json", action="store_true", help="print one JSON object")
    chat.set_defaults(command=cmd_chat)

    ops = sub.add_parser("ops", help="the fleet at a glance: waits, overdue waits, failures")
    ops.add_argument("--json", action="store_true")
    ops.set_defaults(command=cmd_ops)

    watch = sub.add_parser("watch", help="follow one run live until it ends")
    watch.add_argument("run_id")
    watch.set_defaults(command=cmd_watch)

    listing = sub.add_parser("list", help="recent runs")
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--threads", action="store_true", help="only threads")
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
        type=json_object,
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
        type=duration,
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
        type=duration,
        default=DEFAULT_EVERY,
        metavar="DURATION",
        help="with --schedule: how often it runs, e.g. 24h (default: 24h)",
    )
    cleanup.add_argument("--json", action="store_true")
    cleanup.set_defaults(command=cmd_cleanup)

    replay = sub.add_parser(
        "replay-check",
        help="replay the histories of open and recently closed runs on this code (before a "
        "deploy): exit 1 if any does not replay",
    )
    which = replay.add_mutually_exclusive_group()
    which.add_argument(
        "--closed-within",
        type=duration,
        default=DEFAULT_CLOSED_WITHIN,
        metavar="DURATION",
        help="the open runs, and those closed this recently, e.g. 7d (default: 7d)",
    )
    which.add_argument(
        "--query",
        help="a visibility list filter of your own, instead of the window and the version's "
        "scope, e.g. 'WorkflowId = \"x\"'",
    )
    replay.add_argument(
        "--all-versions",
        action="store_true",
        help="check the window's runs pinned to any version, not only those this checkout's "
        "version can meet (unpinned, or pinned to it)",
    )
    replay.add_argument(
        "--limit",
        type=positive,
        default=DEFAULT_LIMIT,
        help=f"replay at most this many runs, the oldest first; a query listing more fails "
        f"(exit 2) saying how many were left (default: {DEFAULT_LIMIT})",
    )
    replay.set_defaults(
        command=cmd_replay_check, workflows=worker_workflows, version=worker_version
    )

    versions = sub.add_parser(
        "versions",
        help="open runs per patch marker and per worker deployment version: when a patch can "
        "be retired, when a version can stop",
        description="Counts the open agent runs from visibility. Per patch marker (oldest "
        "first): 'recorded it' is the open runs that recorded that very marker (its "
        "workflow.patched or deprecate_patch call must stay while any do); 'without it or a "
        "newer one' is the open runs that still take the code the marker's flag turns off: "
        "runs started before the marker existed, and runs no worker has taken yet (they record "
        "the newest marker at their first task). A run records only the newest marker its code "
        "checks for, which implies every earlier one. Per deployment version: the open runs on "
        "it (TemporalWorkerDeploymentVersion), and of them those pinned to it; its state, as "
        "its deployment describes it (current, ramping with its share of new runs, draining: "
        "runs pinned to it are open, drained: none is, inactive: never current nor ramping); "
        "and whether its workers can stop: neither current, ramping nor draining, with no open "
        "run pinned to it (a run that auto-upgrades moves to the current one). Each number is a "
        "count of its own, taken one after another. See docs/versions.md.",
    )
    versions.add_argument(
        "--query",
        help="count only the open runs this visibility filter also lists, e.g. "
        "'TaskQueue = \"agents\"'",
    )
    versions.add_argument(
        "--limit",
        type=positive,
        default=VERSIONS_LIMIT,
        help="list at most this many open runs to find the versions they are on; the counts "
        f"are exact (default: {VERSIONS_LIMIT})",
    )
    versions.add_argument("--json", action="store_true", help="print one JSON object")
    versions.set_defaults(command=cmd_versions, markers=patch_markers)
    evals.add_parsers(sub)
    for command in sub.choices.values():
        command.set_defaults(parser=command)
    return parser


def worker_workflows() -> list[type]:
    """The workflow classes the worker registers (waitstate/workflows/served.py), which
    `replay-check` replays histories on."""
    return list(WORKFLOWS)


def worker_version(settings: Settings) -> str:
    """The worker deployment version a worker of this checkout polls as, `deployment:build_id`
    as visibility names it (WAITSTATE_DEPLOYMENT, and WAITSTATE_BUILD_ID or the worker's build
    id), which `replay-check` scopes its runs to."""
    return f"{settings.deployment}:{build_id(settings)}"


def patch_markers() -> list[str]:
    """The patch markers the worker's workflows check for, oldest first, which `versions`
    counts runs by (`waitstate.workflows.versions.MARKERS`; tests/test_versions_doc.py checks the docs list them)."""
    return list(MARKERS)


if __name__ == "__main__":
    main()
