"""Following a run live, as `run --wait` and `watch` do: each step, retry and job's progress as
it happens, how to answer each new approval request and question, and (`--auto-approve-after`)
approving requests unattended."""

from __future__ import annotations

import asyncio
import sys

from waitstate.cli.output import CliError, one_line, retry_line, step_line
from waitstate.cli.people import decide, how_to_answer
from waitstate.client import ClientError, Report, WaitstateClient
from waitstate.names import cli_command
from waitstate.schemas import RunState
from waitstate.schemas.approvals import DecideInput


async def follow(
    client: WaitstateClient,
    run_id: str,
    *,
    quiet: bool,
    auto_approve_after: float | None = None,
) -> RunState:
    """Print each step as it happens until the run ends; return its final state."""
    seen: dict[str, float] = {}  # approval request id -> when it was first seen
    asked: set[str] = set()  # question ids shown
    shown = _Shown()
    nodes: dict[str, str] = {}  # a tree's node -> how it was last shown
    async for progress in client.follow(run_id, retries=not quiet):
        state = progress.state
        if not quiet:
            for step in progress.steps:
                print(step_line(step), flush=True)
            for retry in progress.retries:
                print(f"  {retry_line(retry)}", flush=True)
            for report in progress.reports:
                shown.report(report, state)
            if state is not None:
                shown.latest(state)
        if state is not None and state.tree is not None and progress.outcome is None:
            if not quiet:
                await _show_tree(client, run_id, nodes)
            # What the nodes below ask is asked here, and decided here.
            state = await client.with_requests_below(run_id, state)
        if state is not None:
            await _attend_approvals(client, run_id, state, seen, quiet, auto_approve_after)
            if not quiet:
                _show_questions(run_id, state, asked)
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
                print(f"  waiting for approval: {one_line(request.reason)}", flush=True)
                print(f"    {cli_command()} approve {run_id} --request {request.request_id}")
                print(
                    f"    {cli_command()} reject {run_id} --request {request.request_id} "
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
                await decide(client, run_id, decision)
            except (CliError, ClientError) as err:  # e.g. someone decided first: the run goes on
                print(f"  auto-approve: {err}", file=sys.stderr, flush=True)
            else:
                if not quiet:
                    print(f"  auto-approved request {request.request_id}", flush=True)


async def _show_tree(client: WaitstateClient, run_id: str, shown: dict[str, str]) -> None:
    """Each node of the run's tree whose status or wait changed since it was last shown."""
    try:
        nodes = await client.tree(run_id)
    except ClientError:
        return
    for node in nodes[1:]:
        now = node.status if node.status != "waiting" else f"waiting for {node.waiting_for}"
        if shown.get(node.path) != now:
            shown[node.path] = now
            print(f"  sub-agent {one_line(node.path)} [{node.agent}]: {now}", flush=True)


class _Shown:
    """The jobs' progress shown: every report a job sent by webhook, from the run's history in
    order (a second report can replace the first in the run's state before the next look), and
    a polled job's latest (its poll's heartbeat, which no history keeps), when new."""

    def __init__(self) -> None:
        self._last: dict[str, str] = {}  # operation id -> the progress last shown

    def report(self, report: Report, state: RunState | None) -> None:
        op = state.operations.get(report.operation_id) if state is not None else None
        self._show(report.operation_id, op.tool if op is not None else None, report.progress)

    def latest(self, state: RunState) -> None:
        for op in state.operations.values():
            if op.completion == "poll" and not op.terminal and op.progress:
                self._show(op.operation_id, op.tool, op.progress)

    def _show(self, operation_id: str, tool: str | None, progress: str) -> None:
        if self._last.get(operation_id) == progress:
            return  # a copy of the report before, or a heartbeat that says nothing new
        self._last[operation_id] = progress
        of = f" ({tool})" if tool else ""
        print(f"  operation {one_line(operation_id)}{of}: {one_line(progress)}", flush=True)


def _show_questions(run_id: str, state: RunState, shown: set[str]) -> None:
    """Show each new open question for a person, and how to answer it (--auto-approve-after
    does not answer questions: what to answer is a person's to say)."""
    for question in state.questions.values():
        if not question.open or question.policy.answered_by != "person":
            continue
        if question.question_id not in shown:
            shown.add(question.question_id)
            print(f"  waiting for an answer ({question.operation_id} {question.tool}):")
            for line in how_to_answer(run_id, question):
                print(f"    {line}", flush=True)
