"""The raw-Temporal floor: a hand-written agent loop of the same shape as AgentRunWorkflow,
with no framework around it.

The workflow keeps the conversation as a list of OpenAI message dicts and hands all of it to
every model activity (the plain way to write this on Temporal). The model activity calls the
same SDK (`openai.AsyncOpenAI(max_retries=0)`) with the same system prompt and tool schemas;
the tool activity calls the very same tool functions (`utc_now`, and a POST to the export
service for `start_export`). A long tool's completion arrives as a signal; a polled one
(`enrich_dataset`) is polled by the tool activity itself, heartbeating, until it ends.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    import httpx
    import openai
    from pydantic import BaseModel

    from bench.tools import ChunkArgs, chunk, chunk_tool
    from examples.demo.basic import UtcNowArgs, demo_tools, utc_now
    from examples.demo.exports import ExportArgs, ExportService, export_tool
    from examples.demo.pipeline import EnrichArgs, EnrichmentPipeline, enrich_tool
    from waitstate.schemas.run import DEFAULT_SYSTEM_PROMPT
    from waitstate.tools import ToolRegistry

FLOOR_WORKFLOW = "FloorWorkflow"
FLOOR_CHAT = "FloorChatWorkflow"
FLOOR_MODEL = "floor_model"
FLOOR_TOOL = "floor_tool"
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=8)
TIMEOUT = timedelta(seconds=120)
POLL_EVERY = 1.0  # seconds: enrich_dataset's poll interval on our side too


@dataclass
class FloorInput:
    """A run: its task, model name and the one tool it offers."""

    task: str
    model: str
    tool: str
    max_turns: int = 12


@dataclass
class ModelInput:
    """What the model activity sends: the whole conversation."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[str]


@dataclass
class ToolInput:
    """One tool call."""

    workflow_id: str
    call_id: str
    name: str
    arguments: str


@dataclass
class ToolOutput:
    """A tool's answer, or the job it started (then the result comes by signal)."""

    content: str = ""
    job_id: str | None = None


@workflow.defn(name=FLOOR_WORKFLOW)
class FloorWorkflow:
    """Model, tools, model... until the model answers; waits for a signal on a started job."""

    def __init__(self) -> None:
        self._completion: str | None = None
        self._waiting = False

    @workflow.run
    async def run(self, input: FloorInput) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
            {"role": "user", "content": input.task},
        ]
        for _ in range(input.max_turns):
            message: dict[str, Any] = await workflow.execute_activity(
                FLOOR_MODEL,
                ModelInput(input.model, messages, [input.tool]),
                result_type=dict,
                start_to_close_timeout=TIMEOUT,
                retry_policy=RETRY,
            )
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return str(message.get("content") or "")
            for call in calls:
                output: ToolOutput = await workflow.execute_activity(
                    FLOOR_TOOL,
                    ToolInput(
                        workflow.info().workflow_id,
                        call["id"],
                        call["function"]["name"],
                        call["function"]["arguments"],
                    ),
                    result_type=ToolOutput,
                    start_to_close_timeout=TIMEOUT,
                    heartbeat_timeout=(
                        timedelta(seconds=POLL_EVERY * 2 + 5)
                        if call["function"]["name"] == "enrich_dataset"
                        else None
                    ),
                    retry_policy=RETRY,
                )
                content = output.content
                if output.job_id is not None:
                    self._waiting = True
                    await workflow.wait_condition(lambda: self._completion is not None)
                    self._waiting = False
                    content = self._completion or ""
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        return ""

    @workflow.signal
    def complete(self, result: str) -> None:
        """The started job's result."""
        self._completion = result

    @workflow.query
    def waiting(self) -> bool:
        """Whether the run waits for a job's signal."""
        return self._waiting


@workflow.defn(name=FLOOR_CHAT)
class FloorChatWorkflow:
    """A conversation, the plain way: each message is an Update that calls the model activity
    with the whole conversation and answers with its reply. It never ends by itself."""

    @workflow.init
    def __init__(self, model: str) -> None:
        self._model = model
        self._messages: list[dict[str, Any]] = [
            {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
        ]

    @workflow.run
    async def run(self, model: str) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.update
    async def send(self, text: str) -> str:
        """One message: the model's reply."""
        self._messages.append({"role": "user", "content": text})
        reply: dict[str, Any] = await workflow.execute_activity(
            FLOOR_MODEL,
            ModelInput(self._model, list(self._messages), []),
            result_type=dict,
            start_to_close_timeout=TIMEOUT,
            retry_policy=RETRY,
        )
        self._messages.append(reply)
        return str(reply.get("content") or "")


@dataclass
class FloorActivities:
    """The floor's activities, over one SDK client and one HTTP client."""

    model_client: openai.AsyncOpenAI
    http: httpx.AsyncClient
    systems_url: str
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)

    @activity.defn(name=FLOOR_MODEL)
    async def call_model(self, input: ModelInput) -> dict[str, Any]:
        """One Chat Completions request; the assistant message comes back as a dict."""
        response = await self.model_client.chat.completions.create(
            model=input.model,
            messages=input.messages,  # type: ignore[arg-type]
            tools=[self._tool(name) for name in input.tools],  # type: ignore[misc]
        )
        message = response.choices[0].message
        return message.model_dump(include={"role", "content", "tool_calls"}, exclude_none=True)

    @activity.defn(name=FLOOR_TOOL)
    async def call_tool(self, input: ToolInput) -> ToolOutput:
        """Run `utc_now` or `chunk`, or start an export at the export service."""
        if input.name == "utc_now":
            return ToolOutput(
                content=await utc_now(UtcNowArgs.model_validate_json(input.arguments))
            )
        if input.name == "chunk":
            return ToolOutput(content=await chunk(ChunkArgs.model_validate_json(input.arguments)))
        if input.name == "enrich_dataset":
            return ToolOutput(content=await self._enrich(input))
        args = ExportArgs.model_validate_json(input.arguments)
        return ToolOutput(job_id=await self._start_job("/exports", args, input))

    async def _start_job(self, path: str, args: BaseModel, input: ToolInput) -> str:
        """Start a job at the demo systems' `path`, once per tool call (its idempotency key):
        the job's id."""
        response = await self.http.post(
            f"{self.systems_url}{path}",
            json=args.model_dump(),
            headers={"Idempotency-Key": f"{input.workflow_id}/{input.call_id}"},
        )
        response.raise_for_status()
        return str(response.json()["job_id"])

    async def _enrich(self, input: ToolInput) -> str:
        """Start the pipeline job, then check it every POLL_EVERY until it ends."""
        args = EnrichArgs.model_validate_json(input.arguments)
        job_id = await self._start_job("/pipelines/enrich", args, input)
        while True:
            status = (await self.http.get(f"{self.systems_url}/pipelines/jobs/{job_id}")).json()
            if status.get("status") != "running":
                return json.dumps(status)
            activity.heartbeat()
            await asyncio.sleep(POLL_EVERY)

    def _tool(self, name: str) -> dict[str, Any]:
        return self.schemas[name]


def tool_schemas(http: httpx.AsyncClient, systems_url: str) -> dict[str, dict[str, Any]]:
    """The OpenAI tool entries of the floor's tools, from the same declarations ours sends."""
    specs = [
        *demo_tools(),
        export_tool(ExportService(http, systems_url)),
        enrich_tool(EnrichmentPipeline(http, systems_url)),
        chunk_tool(),
    ]
    registry = ToolRegistry(specs)
    entries = {}
    for name in ("utc_now", "start_export", "enrich_dataset", "chunk"):
        tool = registry.definitions([name])[0]
        entries[name] = {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
    return entries


def build_floor_worker(client: Client, task_queue: str, max_cached: int) -> Worker:
    """The floor's worker, configured from the same environment variables as ours."""
    http = httpx.AsyncClient(timeout=httpx.Timeout(30.0))
    systems_url = os.environ["DEMO_SYSTEMS_URL"].rstrip("/")
    acts = FloorActivities(
        openai.AsyncOpenAI(
            api_key=os.environ.get("OPENAI_API_KEY", "not-needed"),
            base_url=os.environ["OPENAI_BASE_URL"],
            max_retries=0,
        ),
        http,
        systems_url,
        tool_schemas(http, systems_url),
    )
    # Figure 11's tree: its module imports this one's timeouts, so it is imported here.
    from bench.floor_tree import FloorLeafWorkflow, FloorTreeWorkflow, tree_model

    return Worker(
        client,
        task_queue=task_queue,
        workflows=[FloorWorkflow, FloorChatWorkflow, FloorTreeWorkflow, FloorLeafWorkflow],
        activities=[acts.call_model, acts.call_tool, tree_model],
        max_cached_workflows=max_cached,
    )
