"""The commands about one run: `run` (start it, and with `--wait` follow it), `status`,
`watch`, `list`, `cancel`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from waitstate.apps import AppError, Apps, app_refs, load_apps
from waitstate.cli.follow import follow
from waitstate.cli.output import (
    CliError,
    checked_id,
    invalid,
    one_line,
    preview,
    print_json,
    print_outcome,
    print_rejected,
    retry_line,
    run_exit_code,
    step_line,
    tree_line,
    usage_line,
    when,
)
from waitstate.client import TreeNode, Unanswered, WaitstateClient, new_run_id, started_with
from waitstate.mcp import McpConfigError, parse_servers
from waitstate.providers.base import parse_model_spec
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.tree import sub_agent_tool
from waitstate.settings import Settings
from waitstate.tracing import Tracing, run_span
from waitstate.wording import count_of, span

# The apps the CLI checks names against when none is named: the demo's, from a checkout.
DEMO_APP = "examples.demo.app:app"
NO_TOOLS = (
    "no app is importable here, so the run gets no tools: name its agent (--agent), its "
    "tools, or its app (--app or WAITSTATE_APPS)"
)


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
            print_json({"run_id": run_id, "existing": started.existing, "url": url})
        else:
            print(f"run {run_id}\nweb ui: {url}")
        return 0
    if not args.json:
        given = "; ".join(f"{label} {value}" for label, value in started_with(run_input))
        print(f"run {run_id} ({given})")
        print(f"web ui: {url}")
    state = await follow(
        client, run_id, quiet=args.json, auto_approve_after=args.auto_approve_after
    )
    if args.json:
        print_json(
            {
                "run_id": run_id,
                "existing": started.existing,
                **state.model_dump(mode="json", exclude={"steps"}),
                "output": _structured(state),
            }
        )
    else:
        print_outcome(state)
        print(f"web ui: {url}")
    return run_exit_code(state.status)


async def cmd_status(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Print a run's state."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    status = await client.status(args.run_id)
    state = status.state
    nodes = await client.tree(args.run_id) if state.tree is not None else []
    if args.json:
        retrying = [dataclasses.asdict(retry) for retry in status.retrying]
        print_json(
            {
                "run_id": args.run_id,
                **state.model_dump(mode="json"),
                "retrying": retrying,
                "worker_answered": status.unanswered is None,
                "temporal": _unanswered_json(status.unanswered),
                "nodes": [_node_json(node) for node in nodes[1:]],
            }
        )
        return run_exit_code(state.status)
    print(f"run {args.run_id}: {state.status}")
    for retry in status.retrying:
        print(retry_line(retry))
    if status.unanswered is not None:
        _print_unanswered(status.unanswered, state)
        print(f"web ui: {settings.run_url(args.run_id)}")
        return run_exit_code(state.status)
    if state.agent is not None:
        print(f"agent: {state.agent}")
    print(f"task: {state.task}")
    print(f"model: {state.model}; turns {state.turns}; tool calls {state.tool_calls}")
    print(usage_line(state))
    if state.constraints:
        print(f"constraints: {one_line('; '.join(state.constraints))}")
    if (fork := state.fork) is not None:
        kept = "messages" if state.thread is not None else "turns"
        print(
            f"fork of {fork.origin} (its first {fork.at} {kept}; policy {fork.policy}): "
            f"calls answered {fork.recorded} from the recording, {fork.stubbed} by stubs, "
            f"{fork.live} live; {len(fork.unavailable)} unavailable"
        )
        for refused in fork.unavailable[-5:]:
            print(f"  unavailable: {one_line(refused)}")
    if (thread := state.thread) is not None:
        print(
            f"thread: {count_of(thread.received, 'message')} received; busy policy "
            f"{thread.settings.busy}; closes after {span(thread.settings.close_after)} with no "
            "message"
        )
        for message in thread.messages:  # the last ones it keeps, and every one queued
            outcome = ""
            if message.reply is not None:
                outcome = f" -> {one_line(preview(message.reply))}"
            elif message.error:
                outcome = f" -> error: {one_line(preview(message.error))}"
            print(
                f"  {message.message_id} {message.status}: "
                f"{one_line(preview(message.text))}{outcome}"
            )
    if nodes[1:]:
        print(f"sub-agents ({len(nodes) - 1}, below this run):")
        for node in nodes[1:]:
            print(tree_line(node))
    if state.completed:
        print("completed:")
        for line in state.completed[-20:]:
            print(f"  - {one_line(line)}")
    pending = [op for op in state.operations.values() if not op.terminal]
    for op in pending:
        progress = f", progress: {one_line(op.progress)}" if op.progress else ""
        print(
            f"pending operation: {op.operation_id} {op.tool} job {op.job_id} ({op.status}, "
            f"{op.completion}), expires {op.expires_at.isoformat()}{progress}"
        )
    for request in state.approvals.values():
        if request.open:
            print(
                f"open approval: {request.request_id} for {request.tool} "
                f"({one_line(request.reason)}), expires {request.expires_at.isoformat()}"
            )
    for question in state.questions.values():
        if question.open:
            who = "the model" if question.policy.answered_by == "model" else "a person"
            print(
                f"open question: {question.question_id} of {question.operation_id} "
                f"({question.tool}), for {who}: {one_line(question.message)}; "
                f"expires {question.expires_at.isoformat()}"
            )
    if state.checkpoint is not None:
        checkpoint = state.checkpoint
        print(f"checkpoint ({checkpoint.at.isoformat()}, before {checkpoint.waiting_for}):")
        print(f"  done: {checkpoint.done}")
        print(f"  remaining: {checkpoint.remaining}")
    if state.context_rebuilds or state.continued_as_new:
        print(
            f"context rebuilt {count_of(state.context_rebuilds, 'time')}; "
            f"continued as new {count_of(state.continued_as_new, 'time')}"
        )
    print("steps:")
    for step in state.steps:
        print(step_line(step))
    if state.final_output is not None:
        print(f"answer: {state.final_output}")
    print_rejected(state)
    if state.error:
        print(f"error: {one_line(state.error)}")
    print(f"web ui: {settings.run_url(args.run_id)}")
    return run_exit_code(state.status)


async def cmd_list(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Print recent runs, newest first."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    runs = await client.list_runs(limit=args.limit, threads=args.threads)
    if args.json:
        print_json(
            [
                {
                    "run_id": run.run_id,
                    "status": run.status,
                    "agent": run.agent,
                    "thread": run.thread,
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
        thread = " thread" if run.thread else ""
        print(f"{run.run_id:<36} {run.status:<10} started {run.started.isoformat()}{thread}{agent}")
    return 0


async def cmd_watch(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Follow one run live (turns, tool calls, operations, approvals) until it ends."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    state = await follow(client, args.run_id, quiet=False)
    print_outcome(state)
    return run_exit_code(state.status)


async def cmd_cancel(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Ask a run to cancel; the workflow cancels its in-flight work and ends `cancelled`."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    await client.cancel(args.run_id)
    print(f"cancellation requested for run {args.run_id}")
    return 0


async def _run_input(args: argparse.Namespace, settings: Settings) -> RunInput:
    """The run's input from the arguments, its names checked against the apps the CLI loads.

    A run of a named agent is checked here only against apps named by --app or WAITSTATE_APPS
    (the worker may serve others): without them the worker checks, and fails the run at once
    if a name is unknown. A run without an agent gets every tool of the apps (the demo's when
    none is named) but those that start sub-agents, unless --tools says otherwise.
    """
    if not args.task.strip():
        raise CliError("the task is empty: say what the agent should do", 2)
    if args.max_turns is not None and args.max_turns < 1:
        raise CliError("--max-turns must be at least 1", 2)
    refs = app_refs(args.app, settings.apps)
    apps = _apps(refs, settings)
    checked = apps if refs or not args.agent else None
    degrade_to = getattr(args, "degrade_to", None)
    try:
        fields: dict[str, Any] = {"task": args.task}
        if args.agent:
            fields["agent"] = args.agent
            if checked is not None:
                checked.agent(args.agent)
        else:
            fields["model"] = settings.default_model
            fields["tools"] = _every_tool(apps) if apps is not None else []
            if apps is None and not getattr(args, "tools", None):
                # An installed CLI outside a checkout imports no app of its own: say so, not
                # start a run that silently has no tools.
                print(NO_TOOLS, file=sys.stderr)
        if args.model:
            fields["model"] = args.model
        if args.tools:
            fields["tools"] = args.tools
        if "model" in fields:
            _check_model(fields["model"], checked)
        if checked is not None and "tools" in fields:
            checked.check_tools(fields["tools"])
        if degrade_to is not None:
            try:
                _check_model(degrade_to, checked)
            except AppError as err:
                raise AppError(f"--degrade-to: {err}") from None
    except AppError as err:
        raise CliError(str(err), 2) from None
    finally:
        if apps is not None:
            await apps.aclose()
    if args.max_turns is not None:
        fields["max_turns"] = args.max_turns
    if args.system_prompt:
        fields["system_prompt"] = args.system_prompt
    # `chat` starts threads with this input too, without the budget's options.
    tokens = getattr(args, "budget_tokens", None)
    on_exceed = getattr(args, "on_exceed", "stop")
    if tokens is not None:
        fields["budget"] = {"tokens": tokens, "on_exceed": on_exceed, "degrade_to": degrade_to}
    elif degrade_to or on_exceed != "stop":
        raise CliError("--on-exceed and --degrade-to go with --budget-tokens", 2)
    try:
        return RunInput(**fields)
    except ValidationError as err:
        raise invalid("run", err) from None


def _every_tool(apps: Apps) -> list[str]:
    """The apps' tools but those that start sub-agents: only a run of an agent that lists them
    can start them (a run without one refuses every call of them)."""
    starts = {sub_agent_tool(name) for agent in apps.agents.values() for name in agent.sub_agents}
    return [spec.name for spec in apps.tools if spec.name not in starts]


def _run_id(given: str | None) -> str:
    """`--id`'s value, checked, or a new id when it is not given."""
    return checked_id(given, "--id", new_run_id, "a run")


async def _check_existing(client: WaitstateClient, run_id: str, run_input: RunInput) -> None:
    """A run with this id exists already: following it is what the same command, repeated,
    means; under another task, its outcome would pass for this task's.

    Raises:
        CliError: the run was started with another task.
    """
    existing = await client.started_input(run_id)
    if existing is not None and existing.task != run_input.task:
        raise CliError(
            f"run {run_id} already exists, with another task ({preview(existing.task)!r}): "
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


def _print_unanswered(unanswered: Unanswered, state: RunState) -> None:
    """What Temporal alone knows of a run no worker answered for: what it was started with,
    when, and what it waits for, or how it ended."""
    print(
        f"no worker answered its status query ({one_line(unanswered.reason)}): this is what "
        "Temporal alone knows"
    )
    if state.agent is not None:
        print(f"agent: {state.agent}")
    print(f"task: {one_line(state.task) or '(unknown)'}")
    model = state.model or ("the agent's" if state.agent else "(unknown)")
    print(f"model: {model}")
    print(f"started: {when(unanswered.started)}; ended: {when(unanswered.closed)}")
    if unanswered.closed is not None:  # how it ended, from its history
        print(f"turns {state.turns}; tool calls {state.tool_calls}")
        print(usage_line(state))
        if state.final_output is not None:
            print(f"answer: {state.final_output}")
        if state.error:
            print(f"error: {one_line(state.error)}")
        return
    waiting = unanswered.waiting_for or "none"
    until = f", until {when(unanswered.wait_expires_at)}" if unanswered.wait_expires_at else ""
    pending = unanswered.pending_operations or 0
    print(f"waiting for: {waiting}{until}; pending operations: {pending}")
    for activity in unanswered.pending_activities:
        print(f"pending activity: {activity}")


def _node_json(node: TreeNode) -> dict[str, Any]:
    usage = node.usage.model_dump(mode="json") if node.usage is not None else None
    return {**dataclasses.asdict(node), "usage": usage}


def _unanswered_json(unanswered: Unanswered | None) -> dict[str, Any] | None:
    if unanswered is None:
        return None
    return {
        "reason": unanswered.reason,
        "started": when(unanswered.started, None),
        "closed": when(unanswered.closed, None),
        "waiting_for": unanswered.waiting_for,
        "wait_expires_at": when(unanswered.wait_expires_at, None),
        "pending_operations": unanswered.pending_operations,
        "pending_activities": unanswered.pending_activities,
    }
