"""Following a run live, as `run --wait` and `watch` do: each step, retry and job's progress as
it happens, how to answer each new approval request and question, and (`--auto-approve-after`)
approving requests unattended."""

from __future__ import annotations

import asyncio
import sys

from waitstate.cli.output import CliError, one_line, retry_line, step_line
from waitstate.cli.people import decide, how_to_answer
from waitstate.client import ClientError, WaitstateClient
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
    reported: dict[str, str] = {}  # operation id -> the job's progress last shown
    async for progress in client.follow(run_id, retries=not quiet):
        if not quiet:
            for step in progress.steps:
                print(step_line(step), flush=True)
            for retry in progress.retries:
                print(f"  {retry_line(retry)}", flush=True)
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


def _show_progress(state: RunState, shown: dict[str, str]) -> None:
    """Show each open operation's progress when its job reports something new."""
    for op in state.operations.values():
        if op.terminal or not op.progress or shown.get(op.operation_id) == op.progress:
            continue
        shown[op.operation_id] = op.progress
        print(f"  operation {op.operation_id} ({op.tool}): {one_line(op.progress)}", flush=True)


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
