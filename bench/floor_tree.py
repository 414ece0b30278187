"""Figure 11's floor: the same tree as ours, written on Temporal by hand with no agent code.

A parent runs one activity (the lead's model call: the children's tasks), starts one child
workflow per task at once with the SDK's plain API (each runs one activity, the leaf's model
call, and returns its answer), waits for them all, and runs one more activity (the lead's second
call, given the whole conversation as the floor's other workflows give theirs). The activities
answer as ours's scripted models do (bench/tree_text.py), in the worker, with no model server.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from bench.floor import RETRY, TIMEOUT, ModelInput
    from bench.tree_text import combined, fan_of, leaf_answer, part_task

FLOOR_TREE = "FloorTreeWorkflow"
FLOOR_LEAF = "FloorLeafWorkflow"
FLOOR_TREE_MODEL = "floor_tree_model"
LEAF_TOOL = "leaf"


@dataclass
class TreeInput:
    """The lead's task (with its `fan=N`)."""

    task: str


@workflow.defn(name=FLOOR_LEAF)
class FloorLeafWorkflow:
    """A leaf: one model call, its answer."""

    @workflow.run
    async def run(self, task: str) -> str:
        messages = [{"role": "user", "content": task}]
        message: dict[str, Any] = await workflow.execute_activity(
            FLOOR_TREE_MODEL,
            ModelInput("leaf", messages, []),
            result_type=dict,
            start_to_close_timeout=TIMEOUT,
            retry_policy=RETRY,
        )
        return str(message.get("content") or "")


@workflow.defn(name=FLOOR_TREE)
class FloorTreeWorkflow:
    """The lead: a model call, a child per tool call (all at once), a model call."""

    @workflow.run
    async def run(self, input: TreeInput) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": input.task}]
        message = await self._model(messages)
        messages.append(message)
        calls = message.get("tool_calls") or []
        parent = workflow.info().workflow_id
        answers = await asyncio.gather(
            *(
                workflow.execute_child_workflow(
                    FLOOR_LEAF,
                    json.loads(call["function"]["arguments"])["task"],
                    id=f"{parent}/leaf-{n}",
                    result_type=str,
                )
                for n, call in enumerate(calls, 1)
            )
        )
        for call, answer in zip(calls, answers, strict=True):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": answer})
        return str((await self._model(messages)).get("content") or "")

    async def _model(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        message: dict[str, Any] = await workflow.execute_activity(
            FLOOR_TREE_MODEL,
            ModelInput("lead", messages, [LEAF_TOOL]),
            result_type=dict,
            start_to_close_timeout=TIMEOUT,
            retry_policy=RETRY,
        )
        return message


@activity.defn(name=FLOOR_TREE_MODEL)
async def tree_model(input: ModelInput) -> dict[str, Any]:
    """The lead's or a leaf's reply, as a Chat Completions assistant message."""
    task = input.messages[0]["content"]
    if input.model == "leaf":
        return {"role": "assistant", "content": leaf_answer(task)}
    answers = [m["content"] for m in input.messages if m["role"] == "tool"]
    if answers:
        return {"role": "assistant", "content": combined(answers)}
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {
                "name": LEAF_TOOL,
                "arguments": json.dumps({"task": part_task(task, i + 1)}),
            },
        }
        for i in range(fan_of(task))
    ]
    return {"role": "assistant", "tool_calls": calls}
