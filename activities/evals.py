"""Forks' and evaluations' activities: a fork's recording and input read from the recorded run's
histories (through the client), and a fork set beside its original and scored by the app's
scorers (the worker's apps: their code runs here, never in a workflow)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from waitstate.client import ClientError, RunNotFound, StartFailed, WaitstateClient
from waitstate.client._forks import Recorded
from waitstate.schemas import RunInput, Usage
from waitstate.schemas.budgets import ModelPrice
from waitstate.schemas.evals import (
    ANSWER_CHARS,
    PREPARE_FORK,
    SAME_OUTCOME,
    SCORE_FORK,
    TASK_CHARS,
    EvalCase,
    EvalRow,
    FieldChange,
    Score,
    ScoreInput,
    Scorer,
)
from waitstate.schemas.forks import READ_RECORDING, ForkRequest, Recording, RecordingRequest

from .pulse import pulse

# A scorer's detail, as a report keeps it, and how long it may take over one fork.
DETAIL_CHARS = 500
SCORER_TIMEOUT = 30.0


class EvalActivities:
    """What an evaluation asks of the fleet: forks' inputs, forks' scores."""

    def __init__(self, client: WaitstateClient, scorers: Mapping[str, Scorer]) -> None:
        self._client = client
        self._scorers = dict(scorers)

    @activity.defn(name=PREPARE_FORK)
    async def prepare_fork(self, request: ForkRequest) -> RunInput:
        """The input of the fork `request` asks for.

        Raises:
            ApplicationError: non-retryable, when the run cannot be forked so (no such run, a
                turn it never took); anything else (Temporal unreachable) is retried.
        """
        try:
            async with pulse():
                # Read by the fork itself: the evaluation's history stays small.
                return await self._client.fork_input(request, with_recording=False)
        except (RunNotFound, StartFailed) as err:
            raise ApplicationError(str(err), non_retryable=True) from None

    @activity.defn(name=READ_RECORDING)
    async def read_recording(self, request: RecordingRequest) -> Recording:
        """The recording a fork goes on from (a fork started without one reads it).

        Raises:
            ApplicationError: non-retryable, when the run cannot be forked there (no such run,
                a turn it never took, a recording too big); anything else is retried.
        """
        try:
            async with pulse():
                _, recording = await self._client.recording(request.origin, request.at)
        except (RunNotFound, StartFailed) as err:
            raise ApplicationError(str(err), non_retryable=True) from None
        except ClientError as err:
            raise ApplicationError(str(err)) from None
        return recording

    @activity.defn(name=SCORE_FORK)
    async def score_fork(self, input: ScoreInput) -> EvalRow:
        """The fork `input` names, beside its original: answers, structured fields, tool calls,
        usage and cost, and each scorer's verdict.

        Raises:
            ApplicationError: non-retryable, when a scorer it names is not the app's.
        """
        names = list(self._scorers) if input.scorers is None else input.scorers
        unknown = [name for name in names if name not in self._scorers]
        if unknown:
            raise ApplicationError(
                f"no scorer named {', '.join(unknown)}; the apps' scorers: "
                f"{', '.join(sorted(self._scorers)) or 'none'}",
                non_retryable=True,
            )
        try:
            async with pulse():
                original = await self._client.read_run(input.run_id)
                fork = await self._client.read_run(input.fork_id)
        except RunNotFound as err:
            raise ApplicationError(str(err), non_retryable=True) from None
        except ClientError as err:
            raise ApplicationError(str(err)) from None  # retried
        case = _case(input, original, fork)
        scores = [await _score(name, self._scorers[name], case) for name in names]
        if not names:
            scores = [_same_outcome(case)]
        return EvalRow(
            run_id=input.run_id,
            fork_id=input.fork_id,
            task=case.task[:TASK_CHARS],
            original_status=case.original_status,
            new_status=case.new_status,
            original_answer=_cut(case.original_answer),
            new_answer=_cut(case.new_answer),
            fields=changed_fields(case.original_output, case.new_output),
            original_tools=case.original_tools,
            new_tools=case.new_tools,
            original_usage=_usage(original),
            new_usage=_usage(fork),
            original_cost=_cost(input.prices, original),
            new_cost=_cost(input.prices, fork),
            scores=scores,
            passed=all(score.passed for score in scores),
        )


def _case(input: ScoreInput, original: Recorded, fork: Recorded) -> EvalCase:
    def answer(run: Recorded) -> str | None:
        return run.result.final_output if run.result is not None else None

    def status(run: Recorded) -> str:
        return run.result.status if run.result is not None else "not completed"

    return EvalCase(
        run_id=input.run_id,
        fork_id=input.fork_id,
        task=original.input.task,
        agent=original.input.agent,
        original_answer=answer(original),
        new_answer=answer(fork),
        original_status=status(original),
        new_status=status(fork),
        original_output=as_json(answer(original)),
        new_output=as_json(answer(fork)),
        original_tools=original.tool_calls(after=input.at),
        new_tools=fork.tool_calls(),
    )


async def _score(name: str, scorer: Scorer, case: EvalCase) -> Score:
    """What `scorer` said of `case`, in a thread of its own (it may be slow: the worker's loop
    goes on). A scorer that raises, answers something else, or takes over `SCORER_TIMEOUT`
    fails the run saying so (the app's own code)."""
    try:
        said = await asyncio.wait_for(asyncio.to_thread(scorer, case), SCORER_TIMEOUT)
    except TimeoutError:
        return Score(name=name, passed=False, detail=f"the scorer took over {SCORER_TIMEOUT:g} s")
    except Exception as err:
        return Score(
            name=name, passed=False, detail=f"the scorer raised {type(err).__name__}: {err}"
        )
    if isinstance(said, Score):
        return said.model_copy(update={"name": name, "detail": said.detail[:DETAIL_CHARS]})
    if isinstance(said, bool):
        return Score(name=name, passed=said)
    if isinstance(said, tuple) and len(said) == 2 and isinstance(said[0], bool):
        return Score(name=name, passed=said[0], detail=str(said[1])[:DETAIL_CHARS])
    return Score(
        name=name,
        passed=False,
        detail=f"the scorer answered {type(said).__name__}, not a bool, a Score or (bool, str)",
    )


def _same_outcome(case: EvalCase) -> Score:
    """With no scorer of the app's: the fork ended as its original did."""
    same = case.new_status == case.original_status
    detail = "" if same else f"{case.original_status} became {case.new_status}"
    return Score(name=SAME_OUTCOME, passed=same, detail=detail)


def as_json(answer: str | None) -> Any:
    """An answer as JSON, if it is a JSON object or array (a structured output); else None."""
    if answer is None or not answer.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.loads(answer)
    except ValueError:
        return None


def changed_fields(original: Any, new: Any, prefix: str = "") -> list[FieldChange] | None:
    """The fields of two JSON objects that differ, nested ones by their dotted path (None: not
    both objects)."""
    if not isinstance(original, dict) or not isinstance(new, dict):
        return None
    changes = []
    for key in sorted({*original, *new}, key=str):
        path = f"{prefix}{key}"
        before, after = original.get(key), new.get(key)
        nested = changed_fields(before, after, f"{path}.")
        if nested is not None:
            changes.extend(nested)
        elif before != after or (key in original) != (key in new):
            changes.append(FieldChange(field=path, original=before, new=after))
    return changes


def _usage(run: Recorded) -> Usage:
    return run.result.usage if run.result is not None else Usage()


def _cost(prices: Mapping[str, ModelPrice], run: Recorded) -> float | None:
    """What the run's model calls cost, if its model is priced."""
    models = {turn.request.model for turn in run.turns}
    if not models or not models <= set(prices):
        return None
    cost = sum(prices[turn.request.model].cost(turn.response.usage) for turn in run.turns)
    return round(cost, 8)


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= ANSWER_CHARS:
        return text
    return f"{text[:ANSWER_CHARS]}… [{len(text) - ANSWER_CHARS} more characters]"
