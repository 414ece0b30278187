"""A question for the model asked while the run is in `wait_for_operations` (issue 22, defect
5): the wait ends, the model sees the question and answers it, and the job goes on with the
answer; against the real dev server, gateway and demo systems (the purge, a long tool of our
own whose job asks by webhook). tests/mcp/test_mcp_wait_question.py has an MCP task's."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from examples.demo.purges import PurgeService, purge_tool
from tests.helpers import replays
from tests.rigs import Stack
from tests.workflows.waiting_app import results_seen
from waitstate.apps import load_apps
from waitstate.schemas.questions import QuestionPolicy
from waitstate.workflows.agent_run import AgentRunWorkflow

APP = "tests.workflows.waiting_app:app"
# Long enough for the model to answer many times over; short enough that a run whose wait
# misses the question fails the test soon (the question expires, the purge is declined).
QUESTION_TIMEOUT = timedelta(seconds=20)
RESULT_TIMEOUT = 90


async def test_a_question_for_the_model_ends_its_wait_for_operations_and_is_answered(
    stack: Stack,
) -> None:
    policy = QuestionPolicy(answered_by="model", timeout=QUESTION_TIMEOUT, on_timeout="decline")
    tool = purge_tool(PurgeService(stack.http, stack.systems_url), input=policy, mode="handle")
    worker = stack.worker(tools=[tool], apps=load_apps([APP]))
    async with worker:
        handle = await stack.start(
            "purge the staging events", ["purge_dataset"], model="scripted:purge-wait-answer"
        )
        result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT)
        state = await handle.query(AgentRunWorkflow.status)
        await replays(handle, "wait_for_operations_question_for_the_model")
    purges = (await stack.stats())["purges"]

    _, first_wait, answer, second_wait = results_seen(result, "purge_dataset")
    [asking] = json.loads(first_wait)
    assert asking["status"] == "input_required"
    [question] = asking["questions"]
    assert question["answered_by"] == "you (answer_question)"
    answered = json.loads(answer)
    assert (answered["status"], answered["delivered"]) == ("answered", True)
    [ended] = json.loads(second_wait)
    assert ended["status"] == "succeeded"
    assert ended["result"]["confirmed_by"] == "model"
    request = state.questions[question["question_id"]]
    assert request.answer is not None and request.answer.responder == "model"
    assert request.answer.answered_at is not None
    assert request.answer.answered_at < request.expires_at, "answered, not timed out"
    assert (purges["questions_asked"], purges["answers_applied"]) == (1, 1)
