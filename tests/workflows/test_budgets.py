"""Budgets on the dev server: a run that spent its budget stops, asks a person to raise it (who
may say yes, no, or nothing before the window passes), or goes on with a cheaper model, as its
budget declares; checked before each call, so it never spends past its budget by more than the
one call that crossed it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from examples.demo.basic import demo_tools
from tests.helpers import eventually, make_worker, replays, start_run
from tests.workflows.runs import RUN_ENDS_WITHIN, run_to_end
from waitstate.apps import Apps, load_apps
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas import ModelResponse, RunInput, RunState, Usage
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest, DecideInput
from waitstate.schemas.budgets import RAISE_BUDGET, Budget, BudgetState, ModelPrice
from waitstate.schemas.errors import RUN_FAILED
from waitstate.schemas.run import CALL_MODEL
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.search_attributes import AGENT_STATUS

LOOP = "scripted:forever"  # calls `calculate` every turn, never answers
# The app of the cheaper models runs degrade to (scripted:forever-cheap, scripted:refusing-cheap).
CHEAP = "tests.workflows.budget_app:app"


def _looping(budget: Budget, **fields: Any) -> RunInput:
    return RunInput(
        task="loop", model=LOOP, tools=["calculate"], max_turns=40, budget=budget, **fields
    )


async def _call_tokens(handle: WorkflowHandle[Any, Any]) -> list[int]:
    """Each model call's tokens (input and output), in the order the run made them."""
    kinds: dict[int, str] = {}
    tokens = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            kinds[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            if kinds.get(done.scheduled_event_id) == CALL_MODEL:
                [response] = DATA_CONVERTER.payload_converter.from_payloads(
                    done.result.payloads, [ModelResponse]
                )
                tokens.append(response.usage.input_tokens + response.usage.output_tokens)
    return tokens


def _degrading_at_half(to: str) -> RunInput:
    """A looping run of 800 tokens that goes on with the model `to` from 400 on."""
    return _looping(Budget(tokens=800, on_exceed="degrade", degrade_to=to, degrade_at=0.5))


def _crossed_by_the_last_call(tokens: list[int], limit: int) -> bool:
    return sum(tokens[:-1]) < limit <= sum(tokens)


async def test_a_run_that_spent_its_budget_stops_saying_what_it_spent(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    handle, result, state = await run_to_end(dev_env, task_queue, _looping(Budget(tokens=400)))
    tokens = await _call_tokens(handle)

    assert result.status == "budget_exceeded"
    assert state.budget is not None and state.budget.exceeded
    assert result.error == f"budget exceeded: spent {state.budget.line()}"
    assert (
        state.budget.spent_tokens
        == sum(tokens)
        == result.usage.input_tokens + result.usage.output_tokens
    )
    assert _crossed_by_the_last_call(tokens, 400)  # no call started once it was spent
    described = await handle.describe()
    assert described.typed_search_attributes.get(AGENT_STATUS) == "budget_exceeded"


async def test_a_dollar_budget_prices_each_call_and_refuses_a_model_it_has_no_price_for(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    price = ModelPrice(input=1_000.0, output=3_000.0)  # dollars per million tokens
    priced = Budget(usd=0.5, prices={LOOP: price})
    handle, result, state = await run_to_end(dev_env, task_queue, _looping(priced))
    unpriced = Budget(usd=0.5, prices={"openai:gpt-4.1": price})
    _, refused, refused_state = await run_to_end(dev_env, task_queue, _looping(unpriced))

    assert result.status == "budget_exceeded"
    assert state.budget is not None
    spent = result.usage.input_tokens * 1_000.0 + result.usage.output_tokens * 3_000.0
    assert abs(state.budget.spent_usd - spent / 1_000_000) < 1e-9
    assert state.budget.spent_usd >= 0.5
    # Unpriced: stopped before its first call, which it could not have kept within dollars.
    assert refused.status == "budget_exceeded"
    assert refused.usage.model_calls == 0
    assert refused.error is not None and f"no price for {LOOP}" in refused.error
    assert refused_state.budget is not None and refused_state.budget.spent_usd == 0


async def _decide(handle: WorkflowHandle[Any, Any], decision: str) -> ApprovalRequest:
    """The run's open request to raise its budget, once it is asked, decided `decision`."""

    async def asked() -> ApprovalRequest | None:
        state: RunState = await handle.query(AgentRunWorkflow.status)
        return next((r for r in state.approvals.values() if r.open), None)

    request = await eventually(asked, "a request to raise the budget")
    await handle.execute_update(
        AgentRunWorkflow.decide,
        DecideInput(request_id=request.request_id, decision=decision, reviewer="dana"),
    )
    return request


async def test_a_person_raises_the_budget_once_and_refuses_the_second_time(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    budget = Budget(tokens=300, on_exceed="approve")
    async with make_worker(dev_env.client, task_queue):
        handle = await start_run(dev_env.client, task_queue, _looping(budget))
        first = await _decide(handle, "approve")
        second = await _decide(handle, "reject")
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
    tokens = await _call_tokens(handle)
    await replays(handle, "budget_raised_then_refused")

    assert (first.tool, second.tool) == (RAISE_BUDGET, RAISE_BUDGET)
    assert first.reason.startswith("the run spent ") and "of 300 tokens" in first.reason
    assert "of 600 tokens" in second.reason
    assert result.status == "budget_exceeded"
    assert state.budget is not None
    assert (state.budget.raised, state.budget.tokens) == (1, 600)
    assert _crossed_by_the_last_call(tokens, 600)
    # Before the first request, the run had stopped calling at the first limit.
    before_first = [i for i, _ in enumerate(tokens) if sum(tokens[: i + 1]) >= 300][0]
    assert sum(tokens[:before_first]) < 300


async def test_a_request_to_raise_it_that_nobody_answers_stops_the_run(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    window = ApprovalPolicy(timeout=timedelta(seconds=2), on_timeout="default")
    budget = Budget(tokens=300, on_exceed="approve", approval=window)
    handle, result, state = await run_to_end(dev_env, task_queue, _looping(budget))
    await replays(handle, "budget_raise_unanswered")

    [request] = state.approvals.values()
    assert request.tool == RAISE_BUDGET
    assert request.status == "rejected"
    assert request.decision is not None and request.decision.by_policy
    assert result.status == "budget_exceeded"
    assert state.budget is not None and state.budget.raised == 0


async def test_a_run_goes_on_with_the_cheaper_model_then_stops_at_its_budget(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    handle, result, state = await run_to_end(
        dev_env,
        task_queue,
        _degrading_at_half("scripted:forever-cheap"),
        apps=load_apps([CHEAP]),
        tools=demo_tools(),
    )
    tokens = await _call_tokens(handle)
    models = [step.name for step in state.steps if step.kind == "model"]

    assert state.budget is not None and state.budget.degraded_to == "scripted:forever-cheap"
    switched = models.index("scripted:forever-cheap")
    assert set(models[:switched]) == {LOOP} and set(models[switched:]) == {"scripted:forever-cheap"}
    assert sum(tokens[: switched - 1]) < 400 <= sum(tokens[:switched])  # at half, it switched
    assert result.status == "budget_exceeded"
    assert _crossed_by_the_last_call(tokens, 800)


async def _failed(
    env: WorkflowEnvironment, task_queue: str, run_input: RunInput, apps: Apps | None = None
) -> tuple[str, RunState]:
    """Run `run_input` until it fails: what it failed with, and the state it ended in."""
    async with make_worker(env.client, task_queue, apps=apps, tools=demo_tools()):
        handle = await start_run(env.client, task_queue, run_input)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), RUN_ENDS_WITHIN)
        state: RunState = await handle.query(AgentRunWorkflow.status)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == RUN_FAILED
    return cause.message, state


@pytest.mark.parametrize("degrade_to", ["nosuch:model", "scripted:no-such-script"])
async def test_a_model_to_degrade_to_that_the_worker_cannot_call_fails_the_run_at_once(
    dev_env: WorkflowEnvironment, task_queue: str, degrade_to: str
) -> None:
    # Its form is sound, so no start refuses it: only the worker knows its providers and scripts.
    budget = Budget(tokens=800, on_exceed="degrade", degrade_to=degrade_to)
    message, state = await _failed(dev_env, task_queue, _looping(budget))

    assert state.status == "failed"
    assert state.usage.model_calls == 0, "it failed with its first call, not when it degraded"
    assert message.startswith("model call failed on turn 1: ")
    assert state.error is not None and repr(degrade_to) in state.error
    assert LOOP not in state.error, "the model it could not call is named, not the run's"
    assert state.budget is not None and state.budget.degraded_to is None


async def test_a_failed_call_of_the_model_it_degraded_to_names_that_model(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    _, state = await _failed(
        dev_env, task_queue, _degrading_at_half("scripted:refusing-cheap"), load_apps([CHEAP])
    )

    assert state.budget is not None and state.budget.degraded_to == "scripted:refusing-cheap"
    assert state.status == "failed"
    assert state.error is not None and state.error.startswith("scripted:refusing-cheap: ")
    assert LOOP not in state.error


def test_dollars_spent_past_the_limit_never_read_as_under_it() -> None:
    exceeded = BudgetState(usd=0.005, spent_usd=0.0054, exceeded=True)
    under = BudgetState(usd=0.005, spent_usd=0.00499999)
    whole = BudgetState(usd=1.0, spent_usd=0.12345)

    assert exceeded.line() == "$0.0054 of $0.005"
    assert under.line() == "$0.00499999 of $0.005"
    assert whole.line() == "$0.1235 of $1.00"


def test_a_price_counts_input_a_cache_served_or_took_at_its_own_rate() -> None:
    price = ModelPrice(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75)
    usage = Usage(
        input_tokens=1_000_000,
        cached_input_tokens=600_000,
        cache_write_input_tokens=100_000,
        output_tokens=10_000,
    )
    billed = 300_000 * 3.0 + 600_000 * 0.3 + 100_000 * 3.75 + 10_000 * 15.0
    assert price.cost(usage) == pytest.approx(billed / 1_000_000)
    # Unpriced cache input: at the input price.
    assert ModelPrice(input=2.0, output=8.0).cost(usage) == pytest.approx(2.08)
