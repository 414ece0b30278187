"""The waitstate CLI: start runs, follow them, approve or reject what they ask, inspect them.

python starter.py run "What is 17 * 23?" --wait
python starter.py status RUN_ID --json
python starter.py list
python starter.py pending
python starter.py approve RUN_ID [--request REQ] [--reviewer NAME] [--comment TEXT]
python starter.py reject RUN_ID --reason TEXT
python starter.py cancel RUN_ID
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from temporalio.api.failure.v1 import Failure
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import (
    CancelledError,
    FailureError,
    TerminatedError,
    TimeoutError,
    WorkflowAlreadyStartedError,
)
from temporalio.service import RPCError, RPCStatusCode

from examples.demo.catalog import TOOL_NAMES

# How the gateway tells a run that has ended from an unknown one when an Update is refused.
from gateway.delivery import rpc_refusal
from providers.base import parse_model_spec
from providers.scripted import SCRIPTS
from schemas import RunInput, RunResult, RunState, Step
from schemas.approvals import DecideInput, DecideOutcome
from schemas.builtin import REQUEST_APPROVAL
from schemas.run import CALL_MODEL, CALL_TOOL
from settings import Settings, connect, exit_process
from workflows.agent_run import AgentRunWorkflow
from workflows.search_attributes import (
    AGENT_STATUS,
    PENDING_OPERATIONS,
    WAIT_EXPIRES_AT,
    WAITING_FOR,
)

PROVIDERS = ("openai", "anthropic", "scripted")
FOLLOW_INTERVAL = 0.25
QUERY_TIMEOUT = timedelta(seconds=5)
SUMMARY_CHARS = 200
# `ops` aggregates client-side over at most this many runs per query.
OPS_LIMIT = 1000
# How long `approve`/`reject` wait for the run to answer its `decide` Update. A run whose
# worker is down never answers; the decision may still be applied once one runs.
DECIDE_TIMEOUT = timedelta(seconds=20)
# Activities whose retries a reader of `status` and `watch` should see as they happen (a poll's
# retries are its schedule, not a failure).
RETRIED_CALLS = {CALL_MODEL: "model call", CALL_TOOL: "tool call"}
# Temporal replaces a retrying activity's last failure past 4 KB with this, keeping the start of
# the original as its cause.
FAILURE_TOO_LARGE = "Failure exceeds size limit."


@dataclasses.dataclass(frozen=True)
class Retry:
    """A model or tool call that failed and is being tried again."""

    call: str
    activity_id: str
    attempt: int
    maximum_attempts: int | None
    last_error: str

    def line(self) -> str:
        """E.g. `model call retrying: attempt 3 of 8, last error: openai: HTTP 500: ...`."""
        of = f" of {self.maximum_attempts}" if self.maximum_attempts else ""
        return f"{self.call} retrying: attempt {self.attempt}{of}, last error: {self.last_error}"


class CliError(Exception):
    """A one-line error for the user; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of `starter.py` and the `waitstate` console script."""
    args = _parser().parse_args(argv)
    try:
        code = asyncio.run(args.command(args, Settings.from_env()))
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
        code = err.code
    except KeyboardInterrupt:
        code = 130
    exit_process(code)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="waitstate", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="start an agent run")
    run.add_argument("task", help="what the agent should do")
    run.add_argument("--id", help="run id; starting an id that exists returns that run")
    run.add_argument("--model", help="provider:model (default: $WAITSTATE_MODEL or scripted:demo)")
    run.add_argument(
        "--tools", nargs="+", metavar="TOOL", help="tools the run may use (default: all)"
    )
    run.add_argument("--max-turns", type=int, default=12, help="model calls before stopping")
    run.add_argument("--system-prompt", help="replace the default system prompt")
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

    pending = sub.add_parser("pending", help="runs waiting for a person's decision")
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

    cancel = sub.add_parser("cancel", help="cancel a run")
    cancel.add_argument("run_id")
    cancel.set_defaults(command=cmd_cancel)
    return parser


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """Start a run (or find the one with that id), then optionally follow it to the end."""
    run_input = _run_input(args, settings)
    client = await _connect(settings)
    workflow_id = args.id or f"run-{uuid.uuid4().hex[:12]}"
    handle, existed = await _start(client, settings, workflow_id, run_input)
    url = settings.run_url(handle.id)
    if existed and not args.json:
        print(f"run {handle.id} already exists: not starting another", file=sys.stderr)
    if not args.wait:
        if args.json:
            _print_json({"run_id": handle.id, "existing": existed, "url": url})
        else:
            print(f"run {handle.id}\nweb ui: {url}")
        return 0
    if not args.json:
        print(f"run {handle.id} (model {run_input.model}; tools {', '.join(run_input.tools)})")
        print(f"web ui: {url}")
    state = await _follow(handle, quiet=args.json, auto_approve_after=args.auto_approve_after)
    if args.json:
        _print_json({"run_id": handle.id, **state.model_dump(mode="json", exclude={"steps"})})
    else:
        _print_outcome(state)
        print(f"web ui: {url}")
    return 0 if state.status in ("completed", "max_turns") else 1


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """Print a run's state."""
    client = await _connect(settings)
    handle = client.get_workflow_handle(args.run_id)
    description = await _describe(handle)
    state = await _state(handle, description)
    retries = _retries(description)
    if args.json:
        retrying = [dataclasses.asdict(retry) for retry in retries]
        _print_json({"run_id": args.run_id, **state.model_dump(mode="json"), "retrying": retrying})
        return 0
    print(f"run {args.run_id}: {state.status}")
    for retry in retries:
        print(retry.line())
    print(f"task: {state.task}")
    print(f"model: {state.model}; turns {state.turns}; tool calls {state.tool_calls}")
    print(
        f"usage: {state.usage.model_calls} model calls, "
        f"{state.usage.input_tokens} input + {state.usage.output_tokens} output tokens"
    )
    if state.constraints:
        print(f"constraints: {'; '.join(state.constraints)}")
    if state.completed:
        print("completed:")
        for line in state.completed[-20:]:
            print(f"  - {line}")
    pending = [op for op in state.operations.values() if not op.terminal]
    for op in pending:
        print(
            f"pending operation: {op.operation_id} {op.tool} job {op.job_id} ({op.status}, "
            f"{op.completion}), expires {op.expires_at.isoformat()}"
        )
    for request in state.approvals.values():
        if request.open:
            print(
                f"open approval: {request.request_id} for {request.tool} ({request.reason}), "
                f"expires {request.expires_at.isoformat()}"
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
    if state.error:
        print(f"error: {state.error}")
    print(f"web ui: {settings.run_url(args.run_id)}")
    return 0


async def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    """Print recent runs, newest first."""
    client = await _connect(settings)
    rows: list[dict[str, Any]] = []
    query = f'WorkflowType = "{AgentRunWorkflow.__name__}"'
    async for execution in client.list_workflows(query, limit=args.limit):
        agent_status = execution.typed_search_attributes.get(AGENT_STATUS)
        rows.append(
            {
                "run_id": execution.id,
                "status": agent_status or _closed_status(execution.status),
                "started": execution.start_time.isoformat(),
                "closed": execution.close_time.isoformat() if execution.close_time else None,
            }
        )
    if args.json:
        _print_json(rows)
        return 0
    if not rows:
        print("no runs")
    for row in rows:
        print(f"{row['run_id']:<36} {row['status']:<10} started {row['started']}")
    return 0


async def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    """Print runs waiting for a person, with their open requests."""
    client = await _connect(settings)
    query = f'{WAITING_FOR.name} = "approval" AND ExecutionStatus = "Running"'
    rows: list[dict[str, Any]] = []
    async for execution in client.list_workflows(query):
        handle = client.get_workflow_handle(execution.id)
        try:
            state = await handle.query(AgentRunWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
        except RPCError:
            continue
        for request in state.approvals.values():
            if request.open:
                rows.append(
                    {
                        "run_id": execution.id,
                        "request_id": request.request_id,
                        "tool": request.tool,
                        "reason": request.reason,
                        "expires_at": request.expires_at.isoformat(),
                        "escalated": request.escalated,
                    }
                )
    if args.json:
        _print_json(rows)
        return 0
    if not rows:
        print("no run is waiting for a decision")
    for row in rows:
        print(f"{row['run_id']}  request {row['request_id']}  expires {row['expires_at']}")
        print(f"    {row['reason']}")
        print(f"    python starter.py approve {row['run_id']} --request {row['request_id']}")
    return 0


async def cmd_decide(args: argparse.Namespace, settings: Settings) -> int:
    """Approve or reject a run's request (the run's one open request unless --request), and
    say what the run did with it: applied, or refused and why."""
    client = await _connect(settings)
    handle = client.get_workflow_handle(args.run_id)
    request_id = args.request or await _one_open_request(handle)
    decision = DecideInput(
        request_id=request_id,
        decision=args.decision,
        reviewer=args.reviewer,
        comment=args.comment if args.decision == "approve" else args.reason,
    )
    outcome = await _send_decision(handle, decision)
    print(f"request {request_id} of run {args.run_id}: {outcome.status} by {args.reviewer}")
    return 0


async def cmd_ops(args: argparse.Namespace, settings: Settings) -> int:
    """The fleet from visibility queries: runs by status and by what they wait for, the
    oldest wait, waits past their expiry (stuck: is a worker down?), recent failures."""
    client = await _connect(settings)
    now = datetime.now(UTC)
    kind = f'WorkflowType = "{AgentRunWorkflow.__name__}"'
    by_status: dict[str, int] = {}
    by_wait: dict[str, int] = {}
    waits: list[dict[str, Any]] = []
    async for run in client.list_workflows(
        f'{kind} AND ExecutionStatus = "Running"', limit=OPS_LIMIT
    ):
        attributes = run.typed_search_attributes
        status = attributes.get(AGENT_STATUS) or "running"
        waiting_for = attributes.get(WAITING_FOR) or "none"
        by_status[status] = by_status.get(status, 0) + 1
        if waiting_for == "none":
            continue
        by_wait[waiting_for] = by_wait.get(waiting_for, 0) + 1
        expires = attributes.get(WAIT_EXPIRES_AT)
        waits.append(
            {
                "run_id": run.id,
                "waiting_for": waiting_for,
                "pending_operations": attributes.get(PENDING_OPERATIONS) or 0,
                "started": run.start_time.isoformat(),
                "expires_at": expires.isoformat() if expires else None,
                "overdue": bool(expires and expires < now),
            }
        )
    failures = []
    since = (now - timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")
    failed = f'{kind} AND CloseTime > "{since}" AND ExecutionStatus != "Running"'
    async for run in client.list_workflows(failed, limit=OPS_LIMIT):
        status = run.typed_search_attributes.get(AGENT_STATUS) or _closed_status(run.status)
        if status in ("failed", "approval_expired") or run.status in (
            WorkflowExecutionStatus.FAILED,
            WorkflowExecutionStatus.TIMED_OUT,
            WorkflowExecutionStatus.TERMINATED,
        ):
            failures.append({"run_id": run.id, "status": status, "closed": str(run.close_time)})
    waits.sort(key=lambda w: str(w["started"]))
    overdue = [w for w in waits if w["overdue"]]
    report = {
        "running_by_status": by_status,
        "waiting_for": by_wait,
        "oldest_wait": waits[0] if waits else None,
        "overdue": overdue,
        "recent_failures": failures,
    }
    if args.json:
        _print_json(report)
        return 0
    print("running:", ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "none")
    print("waiting for:", ", ".join(f"{n} {k}" for k, n in sorted(by_wait.items())) or "nothing")
    if waits:
        oldest = waits[0]
        print(
            f"oldest waiting run: {oldest['run_id']} ({oldest['waiting_for']}), started {oldest['started']}"
        )
    for wait in overdue:
        print(
            f"OVERDUE: {wait['run_id']} waiting for {wait['waiting_for']}, expired "
            f"{wait['expires_at']} and still open: is a worker running?"
        )
    for failure in failures[:10]:
        print(f"failed: {failure['run_id']} ({failure['status']}) at {failure['closed']}")
    return 0


async def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    """Follow one run live (turns, tool calls, operations, approvals) until it ends."""
    client = await _connect(settings)
    handle = client.get_workflow_handle(args.run_id, result_type=RunResult)
    await _describe(handle)
    state = await _follow(handle, quiet=False)
    _print_outcome(state)
    return 0 if state.status in ("completed", "max_turns") else 1


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Ask a run to cancel; the workflow cancels its in-flight work and ends `cancelled`."""
    client = await _connect(settings)
    handle = client.get_workflow_handle(args.run_id)
    description = await _describe(handle)
    if description.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(
            f"run {args.run_id} has already ended ({_closed_status(description.status)})"
        )
    await handle.cancel()
    print(f"cancellation requested for run {args.run_id}")
    return 0


def _run_input(args: argparse.Namespace, settings: Settings) -> RunInput:
    model = args.model or settings.default_model
    try:
        provider, name = parse_model_spec(model)
    except ValueError as err:
        raise CliError(str(err), code=2) from err
    if provider not in PROVIDERS:
        raise CliError(
            f"unknown provider {provider!r} in {model!r}; known: {', '.join(PROVIDERS)}", 2
        )
    if provider == "scripted" and name not in SCRIPTS:
        raise CliError(f"no script named {name!r}; scripts: {', '.join(sorted(SCRIPTS))}", 2)
    known = [*TOOL_NAMES, REQUEST_APPROVAL]
    tools = args.tools or list(TOOL_NAMES)
    if unknown := [tool for tool in tools if tool not in known]:
        raise CliError(f"unknown tools: {', '.join(unknown)}; known: {', '.join(known)}", 2)
    if args.max_turns < 1:
        raise CliError("--max-turns must be at least 1", 2)
    fields: dict[str, Any] = {"task": args.task, "model": model, "tools": tools}
    fields["max_turns"] = args.max_turns
    if args.system_prompt:
        fields["system_prompt"] = args.system_prompt
    return RunInput(**fields)


async def _connect(settings: Settings) -> Client:
    try:
        return await connect(settings)
    except Exception as err:  # the SDK raises RuntimeError wrapping transport errors
        reason = str(err).splitlines()[0]
        raise CliError(
            f"cannot reach Temporal at {settings.temporal_address}: {reason}", 2
        ) from err


async def _start(
    client: Client, settings: Settings, workflow_id: str, run_input: RunInput
) -> tuple[WorkflowHandle[Any, RunResult], bool]:
    """Start the run, or return the existing run with that id: one id, one run, ever."""
    try:
        handle = await client.start_workflow(
            AgentRunWorkflow.run,
            run_input,
            id=workflow_id,
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            search_attributes=TypedSearchAttributes([SearchAttributePair(AGENT_STATUS, "running")]),
            static_summary=run_input.task[:SUMMARY_CHARS],
            static_details=(
                f"model: {run_input.model}\n\ntools: {', '.join(run_input.tools) or 'none'}"
                f"\n\nmax turns: {run_input.max_turns}"
            ),
        )
        return handle, False
    except WorkflowAlreadyStartedError:
        pass
    except RPCError as err:
        raise CliError(f"could not start run {workflow_id}: {err.message}") from err
    return client.get_workflow_handle(workflow_id, result_type=RunResult), True


async def _one_open_request(handle: WorkflowHandle[Any, Any]) -> str:
    """The id of the run's one open approval request.

    Raises:
        CliError: unknown or ended run, no open request or several, or no worker to ask.
    """
    description = await _describe(handle)
    if description.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(f"run {handle.id} has already ended ({_closed_status(description.status)})")
    try:
        state = await handle.query(AgentRunWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowQueryFailedError) as err:
        raise CliError(
            f"could not ask run {handle.id} for its open requests ({_first_line(err)}): "
            "is a worker running? Name the request with --request"
        ) from err
    open_ids = [r.request_id for r in state.approvals.values() if r.open]
    if not open_ids:
        raise CliError(f"run {handle.id} has no open approval request")
    if len(open_ids) > 1:
        listing = "; ".join(f"{i} ({state.approvals[i].reason})" for i in open_ids)
        raise CliError(
            f"run {handle.id} has several open requests; pick one with --request: {listing}"
        )
    return open_ids[0]


async def _send_decision(handle: WorkflowHandle[Any, Any], decision: DecideInput) -> DecideOutcome:
    """Send a decision as the run's `decide` Update and return what the run did with it.

    Raises:
        CliError: the run refused it (unknown request, already decided or expired, run ended
            or unknown) or did not answer in time: code 1; Temporal unreachable: code 2.
    """
    verb = decision.decision
    try:
        async with asyncio.timeout(DECIDE_TIMEOUT.total_seconds()):
            outcome = await handle.execute_update(AgentRunWorkflow.decide, decision)
    except WorkflowUpdateFailedError as err:
        # The run's validator refused it: nothing was recorded.
        raise CliError(f"{verb} refused by run {handle.id}: {_first_line(err.cause)}") from err
    except RPCError as err:
        if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
            raise CliError(f"cannot reach Temporal: {_first_line(err)}", 2) from err
        if err.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
            # E.g. PERMISSION_DENIED: CLI decisions are authorised by namespace access.
            raise CliError(f"{verb} refused by Temporal: {_first_line(err)}") from err
        if rpc_refusal(err).code == "run_ended":
            raise CliError(f"run {handle.id} has already ended: {verb} not applied") from err
        raise CliError(f"no run with id {handle.id}") from err
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
        raise CliError(
            f"run {handle.id} did not answer within {DECIDE_TIMEOUT.total_seconds():g} s "
            f"(is a worker running?); the {verb} may still be applied when one runs: "
            f"check with `status {handle.id}`"
        ) from err
    if not outcome.accepted:
        raise CliError(f"{verb} not applied by run {handle.id}: {outcome.reason or outcome.status}")
    return outcome


async def _follow(
    handle: WorkflowHandle[Any, RunResult], *, quiet: bool, auto_approve_after: float | None = None
) -> RunState:
    """Print each step as it happens until the run ends; return its final state."""
    shown = 0
    seen: dict[str, float] = {}  # approval request id -> when it was first seen
    retries_shown: set[tuple[str, int]] = set()  # (activity id, attempt)
    result = asyncio.create_task(_outcome(handle))
    while True:
        done, _ = await asyncio.wait({result}, timeout=FOLLOW_INTERVAL)
        try:
            state = await handle.query(AgentRunWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
        except RPCError:
            state = None
        if state is not None and not quiet:
            for step in state.steps[shown:]:
                print(_step_line(step), flush=True)
            shown = len(state.steps)
        if not quiet and not done:
            await _show_retries(handle, retries_shown)
        if state is not None:
            await _attend_approvals(handle, state, seen, quiet, auto_approve_after)
        if done:
            final = result.result()
            if state is not None:
                # The query's state has the steps; the outcome knows how it ended.
                state.status, state.error = final.status, final.error
                state.final_output = final.final_output
                return state
            return final


async def _show_retries(handle: WorkflowHandle[Any, Any], shown: set[tuple[str, int]]) -> None:
    """Print each new attempt of a failing model or tool call, once."""
    try:
        description = await handle.describe()
    except RPCError:
        return
    for retry in _retries(description):
        if (retry.activity_id, retry.attempt) not in shown:
            shown.add((retry.activity_id, retry.attempt))
            print(f"  {retry.line()}", flush=True)


async def _attend_approvals(
    handle: WorkflowHandle[Any, RunResult],
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
                print(f"  waiting for approval: {request.reason}", flush=True)
                print(f"    python starter.py approve {handle.id} --request {request.request_id}")
                print(
                    f"    python starter.py reject {handle.id} --request {request.request_id} "
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
                await _send_decision(handle, decision)
            except CliError as err:  # e.g. someone decided it first: the run goes on
                print(f"  auto-approve: {err}", file=sys.stderr, flush=True)
            else:
                if not quiet:
                    print(f"  auto-approved request {request.request_id}", flush=True)


async def _outcome(handle: WorkflowHandle[Any, RunResult]) -> RunState:
    """How a run ended, from its history alone (no worker needed)."""
    try:
        result = await handle.result()
    except WorkflowFailureError as err:
        cause = err.cause
        if isinstance(cause, CancelledError):
            return RunState(status="cancelled", error="cancelled")
        if isinstance(cause, TerminatedError):
            return RunState(status="failed", error=f"terminated: {cause.message}")
        if isinstance(cause, TimeoutError):
            return RunState(status="failed", error="timed out")
        return RunState(status="failed", error=str(cause) if cause else str(err))
    return RunState(
        status=result.status,
        error=result.error,
        turns=result.turns,
        tool_calls=result.tool_calls,
        usage=result.usage,
        final_output=result.final_output,
    )


async def _state(
    handle: WorkflowHandle[Any, Any], description: WorkflowExecutionDescription
) -> RunState:
    """A run's state: the workflow's own answer, or, with no worker to ask, its history's."""
    try:
        return await handle.query(AgentRunWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
    except RPCError:
        if description.status == WorkflowExecutionStatus.RUNNING:
            status = description.typed_search_attributes.get(AGENT_STATUS) or "running"
            return RunState(status=status, error="no worker answered; details unavailable")
    return await _outcome(handle)


async def _describe(handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionDescription:
    try:
        return await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"no run with id {handle.id}") from err
        raise CliError(f"could not look up run {handle.id}: {err.message}") from err


def _retries(description: WorkflowExecutionDescription) -> list[Retry]:
    """Model and tool calls of the run that failed and are being retried, from the server's
    record of its pending activities (no worker needed)."""
    return [
        Retry(
            call=RETRIED_CALLS[pending.activity_type.name],
            activity_id=pending.activity_id,
            attempt=pending.attempt,
            maximum_attempts=pending.maximum_attempts or None,  # 0: unlimited
            last_error=_failure_message(pending.last_failure),
        )
        for pending in description.raw_description.pending_activities
        if pending.activity_type.name in RETRIED_CALLS
        and (pending.attempt > 1 or pending.HasField("last_failure"))
    ]


def _failure_message(failure: Failure) -> str:
    if failure.message == FAILURE_TOO_LARGE and failure.HasField("cause"):
        return f"{failure.cause.message} (truncated by Temporal: over its failure size limit)"
    return failure.message


def _closed_status(status: WorkflowExecutionStatus | None) -> str:
    return (
        {
            WorkflowExecutionStatus.RUNNING: "running",
            WorkflowExecutionStatus.COMPLETED: "completed",
            WorkflowExecutionStatus.CANCELED: "cancelled",
        }.get(status, "failed")
        if status
        else "unknown"
    )


def _first_line(err: BaseException) -> str:
    # Every CLI error is one line; server and SDK messages may span several.
    text = err.message if isinstance(err, RPCError | FailureError) else str(err)
    return (text.strip() or type(err).__name__).splitlines()[0]


def _step_line(step: Step) -> str:
    mark = " (error)" if step.is_error else ""
    return f"  turn {step.turn:<3} {step.kind:<5} {step.name}{mark}: {step.detail}"


def _print_outcome(state: RunState) -> None:
    tokens = state.usage.input_tokens + state.usage.output_tokens
    print(
        f"{state.status} after {state.turns} turns, {state.tool_calls} tool calls, "
        f"{state.usage.model_calls} model calls, {tokens} tokens"
    )
    if state.final_output is not None:
        print(f"answer: {state.final_output}")
    if state.error:
        print(f"error: {state.error}")


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=None, default=str))


if __name__ == "__main__":
    main()
