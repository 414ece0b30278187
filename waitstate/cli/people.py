"""The commands for people: `pending` (what runs wait for people to decide or answer),
`approve` and `reject` (a run's approval request), `answer` (a question a run's operation
asks)."""

from __future__ import annotations

import argparse
import json
import math
import shlex
from collections.abc import Awaitable
from typing import Any, TypeVar

from waitstate.cli.output import CliError, one_line, preview, print_json
from waitstate.client import (
    ANSWER_TIMEOUT,
    DECIDE_TIMEOUT,
    AnswerRefused,
    DecisionRefused,
    NotAnswered,
    PendingQuestion,
    PendingRequest,
    RunEnded,
    TemporalFailed,
    WaitstateClient,
)
from waitstate.names import cli_command
from waitstate.schemas.approvals import DecideInput, DecideOutcome
from waitstate.schemas.questions import AnswerInput, AnswerOutcome, QuestionRequest
from waitstate.settings import Settings
from waitstate.tracing import Tracing


async def cmd_pending(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Print runs waiting for a person, with their open requests and questions."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    pending = await client.waiting_for_people()
    if args.json:
        print_json(
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
        print(f"    {one_line(request.reason)}")
        print(f"    {cli_command()} approve {row.run_id} --request {request.request_id}")
    for asked in pending.questions:
        question = asked.question
        print(
            f"{asked.run_id}  question {question.question_id}  operation {question.operation_id} "
            f"({question.tool})  expires {question.expires_at.isoformat()}"
        )
        for line in how_to_answer(asked.run_id, question):
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
    outcome = await decide(client, args.run_id, decision)
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
        print(f"{said}; the job did not take it: {one_line(outcome.reason) or 'no reason given'}")
        return 1
    print(f"{said}; the job has it")
    return 0


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
) -> QuestionRequest | None:
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
            f"{q.question_id} ({q.operation_id} {q.tool}: {preview(q.message)})" for q in questions
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
    return await _applied(
        client.answer(run_id, answer),
        run_id,
        "answer",
        late=f"run {run_id} did not answer within {ANSWER_TIMEOUT.total_seconds():g} s (is a "
        "worker running, or the job's system slow to take the answer?); the answer may "
        f"still be applied: run the same command again with --question {answer.question_id} "
        "to learn what became of it (it is applied once)",
    )


async def decide(client: WaitstateClient, run_id: str, decision: DecideInput) -> DecideOutcome:
    """Send a decision and return what the run did with it.

    Raises:
        CliError: the run refused it (unknown request, already decided or expired, run ended)
            or did not answer in time, or did not apply it.
        ClientError: unknown run (code 1), Temporal unreachable (code 2).
    """
    verb = decision.decision
    return await _applied(
        client.decide(run_id, decision),
        run_id,
        verb,
        late=f"run {run_id} did not answer within {DECIDE_TIMEOUT.total_seconds():g} s "
        f"(is a worker running?); the {verb} may still be applied when one runs: run the same "
        f"command again with --request {decision.request_id} to learn what became of it (it is "
        "applied once)",
    )


_Outcome = TypeVar("_Outcome", DecideOutcome, AnswerOutcome)


async def _applied(sending: Awaitable[_Outcome], run_id: str, what: str, late: str) -> _Outcome:
    """What the run did with `what` (`answer`, `approve`, `reject`) once `sending` returns it.

    Raises:
        CliError: the run refused it or has ended, Temporal refused it, the run did not answer
            in time (`late` says so), or it did not apply it.
        ClientError: unknown run (code 1), Temporal unreachable (code 2).
    """
    try:
        outcome = await sending
    except (AnswerRefused, DecisionRefused) as err:
        raise CliError(f"{what} refused by run {run_id}: {err.reason}") from err
    except TemporalFailed as err:
        # E.g. PERMISSION_DENIED: CLI decisions and answers are authorised by namespace access.
        raise CliError(f"{what} refused by Temporal: {err.reason}") from err
    except RunEnded as err:
        raise CliError(f"run {run_id} has already ended: {what} not applied") from err
    except NotAnswered as err:
        raise CliError(late) from err
    if not outcome.accepted:
        raise CliError(f"{what} not applied by run {run_id}: {outcome.reason or outcome.status}")
    return outcome


def how_to_answer(run_id: str, question: QuestionRequest) -> list[str]:
    """A question's text and schema, and the commands that answer it, each working as pasted:
    `--accept` with an example answer whose values are to be replaced (or, where no example
    fits the schema, read from a file to write), and `--decline`."""
    # optional: jsonschema, here, not at the top: the checker costs every command ~0.1 s to
    # load, and only those that show a question need it.
    from waitstate.elicitation import answer_command, example_answer

    quoted = f"{shlex.quote(run_id)} --question {shlex.quote(question.question_id)}"
    command = f"{cli_command()} answer {quoted}"
    schema = json.dumps(question.requested_schema, separators=(",", ":"))
    accept = answer_command(run_id, question.question_id, question.requested_schema)
    if example_answer(question.requested_schema) is None:
        how = "answer with a JSON object matching the schema, written to answer.json:"
    else:
        how = "answer (the values are examples: put yours in):"
    return [
        *question.message.splitlines(),
        f"answer schema: {schema}",
        how,
        accept,
        f"{command} --decline",
    ]


def json_object(text: str) -> dict[str, Any]:
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
