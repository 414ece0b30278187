"""An evaluation's page and its JSON over HTTP, end to end (the real gateway with operator keys,
the dev server, a worker serving tests/workflows/fork_app.py): an operator key opens them, and
nothing else does; the runs' text is shown escaped; an id that is no evaluation is unknown."""

from __future__ import annotations

import asyncio

from temporalio.testing import WorkflowEnvironment

from tests.gateway.test_inbox import _signed_in
from tests.rigs import OPERATOR, bearer, serving_stack
from tests.workflows.fork_app import serving
from tests.workflows.test_forks import WITHIN, _ran
from waitstate.gateway.pages.html import document
from waitstate.gateway.routes.evals import _body
from waitstate.schemas import RunInput
from waitstate.schemas.evals import EvalInput, EvalReport, EvalRow

KEYS = {"evals": "v" * 40}
HOSTILE_TASK = "serve customer=eve <script>alert(1)</script> | & more"


async def test_an_operator_reads_an_evaluations_page_and_its_json(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    gateway = serving_stack(dev_env.client, task_queue, KEYS, "evals", events=True, within=WITHIN)
    async with gateway as rig, serving(dev_env, task_queue) as client:
        run, result = await _ran(client, RunInput(task=HOSTILE_TASK, agent="shop"))
        eval_id = await client.evaluate(EvalInput(runs=[run], model="scripted:shop-more"))
        await asyncio.wait_for(client.eval_report(eval_id, wait=True), WITHIN)

        anonymous = await rig.http.get(f"/evals/{eval_id}")
        wrong = await rig.http.get(f"/evals/{eval_id}", headers=bearer("not-a-key-" + "x" * 30))
        anonymous_json = await rig.http.get(f"/evals/{eval_id}.json")
        page = await rig.http.get(f"/evals/{eval_id}", headers=bearer(OPERATOR))
        data = await rig.http.get(f"/evals/{eval_id}.json", headers=bearer(OPERATOR))
        unknown = await rig.http.get("/evals/eval-nobody", headers=bearer(OPERATOR))
        unknown_json = await rig.http.get("/evals/eval-nobody.json", headers=bearer(OPERATOR))
        # A run's id is no evaluation's.
        a_run = await rig.http.get(f"/evals/{run}", headers=bearer(OPERATOR))
        # A browser signed in to the inbox opens it with the inbox's session cookie.
        async with _signed_in(rig) as browser:
            in_browser = await browser.get(f"/pages/inbox/evals/{eval_id}")
        signed_out = await rig.http.get(f"/pages/inbox/evals/{eval_id}")

    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "missing_operator_key"
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_operator_key"
    assert anonymous_json.status_code == 401

    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["x-frame-options"] == "DENY"
    html = page.text
    assert "<script>alert(1)" not in html
    assert "serve customer=eve &lt;script&gt;alert(1)&lt;/script&gt; | &amp; more" in html
    assert "0 of 1 runs passed (0%), threshold 100%: does not hold." in html
    assert "model scripted:shop-more" in html
    assert "charged_ten: fail" in html
    assert result.final_output is not None and result.final_output in html  # the original's

    assert data.status_code == 200 and data.headers["content-type"] == "application/json"
    report = data.json()
    assert report["eval_id"] == eval_id and report["done"] is True and report["holds"] is False
    assert report["rows"][0]["task"] == HOSTILE_TASK and report["rows"][0]["same_tools"] is True

    assert in_browser.status_code == 200 and in_browser.text == page.text
    assert signed_out.status_code == 401
    assert signed_out.json()["error"]["code"] == "not_signed_in"

    for refused in (unknown, unknown_json, a_run):
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "eval_not_found"


async def test_a_gateway_without_operator_keys_serves_no_evaluation(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with serving_stack(dev_env.client, task_queue, KEYS, "evals", within=WITHIN) as stack:
        response = await stack.http.get("/evals/eval-1", headers=bearer(OPERATOR))
    assert response.status_code == 404 and response.json()["error"]["code"] == "evals_disabled"


def test_a_running_evaluations_page_says_how_far_it_is_its_answers_escaped() -> None:
    # A row as a report's JSON holds it: every text in it from the runs.
    row = EvalRow.model_validate(
        {
            "run_id": "run-<1>",
            "fork_id": "fork-1",
            "task": "t",
            "original_status": "completed",
            "new_status": "completed",
            "original_answer": "a | b\n<script>alert(1)</script>",
            "new_answer": "<img src=x onerror=alert(1)>",
            "original_tools": ["lookup"],
            "new_tools": ["<b>charge</b>"],
            "scores": [{"name": "judge", "passed": True, "detail": "<i>fine</i>"}],
            "passed": True,
        }
    )
    report = EvalReport(eval_id="eval-2", input=EvalInput(runs=["run-<1>", "r2"]), rows=[row])
    page = document("Evaluation eval-2", _body(report))

    assert "running: 1 of 2 runs scored" in page
    assert "<script>alert" not in page and "<img" not in page and "<b>charge" not in page
    assert "<pre>a | b\n&lt;script&gt;alert(1)&lt;/script&gt;</pre>" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "judge: pass (&lt;i&gt;fine&lt;/i&gt;)" in page
    assert "<h2>run-&lt;1&gt;: pass</h2>" in page
