"""Evaluations on the dev server: recorded runs forked under `recorded` by an `EvalWorkflow`,
each fork set beside its original and scored by the app's scorer, the report read back."""

from __future__ import annotations

import asyncio

from tests.helpers import replays
from tests.workflows import fork_app
from tests.workflows.test_forks import WITHIN, _ran
from waitstate.client import WaitstateClient
from waitstate.schemas import RunInput
from waitstate.schemas.budgets import ModelPrice
from waitstate.schemas.evals import EvalInput


async def test_an_evaluation_forks_each_run_and_scores_it_against_its_original(
    shop: WaitstateClient,
) -> None:
    runs = [
        (await _ran(shop, RunInput(task=f"serve customer=c{n}", agent="shop")))[0] for n in range(3)
    ]
    calls_before = list(fork_app.CALLED)
    price = {"scripted:shop": ModelPrice(input=1, output=2)}
    same = await shop.evaluate(EvalInput(runs=runs, prices=price))
    report = await asyncio.wait_for(shop.eval_report(same, wait=True), WITHIN)
    assert report.done and report.holds and report.passed == 3
    assert [row.run_id for row in report.rows] == runs
    for row in report.rows:
        assert row.new_answer == row.original_answer and row.scores[0].passed
        assert row.original_tools == row.new_tools == ["lookup", "charge"]
        assert row.fields is None  # the answers are text
        assert row.original_cost is not None and row.original_cost == row.new_cost
        assert row.new_usage.model_calls == 3

    changed = await shop.evaluate(
        EvalInput(runs=runs, model="scripted:shop-more", threshold=0.5, concurrency=2)
    )
    report = await asyncio.wait_for(shop.eval_report(changed, wait=True), WITHIN)
    assert report.done and not report.holds and report.passed == 0
    for row in report.rows:
        assert row.new_answer != row.original_answer
        assert row.new_tools == ["lookup", "charge"]  # the charge was refused, not run
        assert row.scores[0].name == "charged_ten" and not row.scores[0].passed
        assert row.new_cost is None  # its model is not priced
    assert calls_before == fork_app.CALLED
    await replays(shop.handle(changed), "eval_forks_scored")


async def test_a_run_that_cannot_be_forked_is_a_failed_row_not_a_failed_evaluation(
    shop: WaitstateClient,
) -> None:
    run, _ = await _ran(shop, RunInput(task="serve customer=zed", agent="shop"))
    eval_id = await shop.evaluate(EvalInput(runs=[run, "run-nobody"], at=1))
    report = await asyncio.wait_for(shop.eval_report(eval_id, wait=True), WITHIN)
    assert [row.passed for row in report.rows] == [True, False]
    assert report.rows[1].error is not None and "run-nobody" in report.rows[1].error
    assert report.pass_rate == 0.5 and not report.holds
