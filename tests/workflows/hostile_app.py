"""Jobs that ask hostile questions, and the scripts that start them: an MCP task that asks in
whatever schema its run's task names (tests/mcp/reports_server.py's `ask_with_schema`), a long
tool of our own whose job asks by webhook or by poll (`AskingJobs`), and a run that exports
while another's question is attacked.

Served in the test's process (`make_worker`), or by `python worker.py` in a process of its own
(`WAITSTATE_APPS=tests.workflows.hostile_app:app`, with `DEMO_SYSTEMS_URL` for the export).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from pydantic import BaseModel, Field

from examples.demo.exports import ExportService, export_tool
from tests.script_steps import answer_then_wait, call, tool_results
from waitstate import (
    App,
    Completion,
    Job,
    JobAnswer,
    LongSpec,
    Message,
    QuestionPolicy,
    StartContext,
    ToolDefinition,
    ToolError,
    ToolSpec,
)
from waitstate.schemas.operations import CompletionMode


def _task(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role == "user"), "")


def ask_in_the_tasks_schema(
    messages: Sequence[Message], tools: Sequence[ToolDefinition]
) -> Message:
    """Calls the MCP server's `ask_with_schema` with the run's task as the schema; answers with
    the result it got."""
    results = tool_results(messages)
    if not results:
        return call(0, "reports__ask_with_schema", {"schema": _task(messages)})
    return Message(role="assistant", content=f"got: {results[-1].content}")


def ask_job(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls `ask_job` for the case the run's task names; answers each question the model is
    given (`answer_question`, with content whatever the schema); answers with every result."""
    results = tool_results(messages)
    if not results:
        return call(0, "ask_job", {"case": _task(messages)})
    answering = answer_then_wait(results, "ask_job", {"name": "ana"})
    if answering is not None:
        return answering
    return Message(role="assistant", content="\n".join(f"{m.name}: {m.content}" for m in results))


def export_once(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Exports Q3's transactions (a job that completes by webhook); answers with the result."""
    results = tool_results(messages)
    if not results:
        return call(0, "start_export", {"dataset": "transactions", "period": "2025-Q3"})
    return Message(role="assistant", content=f"got: {results[-1].content}")


class AskArgs(BaseModel):
    case: str = Field(description="Which of the test's schemas the job asks in.")


@dataclass
class Report:
    """A report the job sent the gateway, and the gateway's answer."""

    job_id: str
    body: dict[str, Any]
    status_code: int
    answer: dict[str, Any]


@dataclass
class AskingJobs:
    """The external system of `ask_job`: each job asks one question (key `form`) in the schema
    its case names, by webhook (`callback`) or when polled (`poll`), and ends with the answer it
    gets; a job whose question the gateway refuses fails, saying why."""

    http: httpx.AsyncClient
    schemas: dict[str, Any]
    reports: list[Report] = field(default_factory=list)
    answers: list[tuple[str, JobAnswer]] = field(default_factory=list)
    _cases: dict[str, str] = field(default_factory=dict)
    _callbacks: dict[str, StartContext] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self, args: AskArgs, context: StartContext) -> Job:
        # One job per idempotency key: a retried start finds the job it made.
        job_id = f"job-{context.idempotency_key}"
        if job_id in self._cases:
            return Job(job_id)
        self._cases[job_id] = args.case
        if context.callback_url is not None:
            self._callbacks[job_id] = context
            task = asyncio.create_task(self._report(job_id, self._asking(job_id)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return Job(job_id)

    def _asking(self, job_id: str) -> Completion:
        question = {
            "key": "form",
            "message": "Who confirms?",
            "requested_schema": self.schemas[self._cases[job_id]],
        }
        return Completion.model_validate({"status": "input_required", "questions": [question]})

    async def _report(self, job_id: str, completion: Completion) -> None:
        context = self._callbacks[job_id]
        assert context.callback_url is not None
        body = completion.model_dump(mode="json", exclude_none=True)
        response = await self.http.post(
            context.callback_url,
            json=body,
            headers={"Authorization": f"Bearer {context.callback_token}"},
        )
        self.reports.append(Report(job_id, body, response.status_code, response.json()))
        if response.status_code == 422 and completion.status == "input_required":
            # The job cannot ask: it fails, and says why.
            message = response.json()["error"]["message"]
            failed = {"status": "failed", "error": {"code": "question_refused", "message": message}}
            await self._report(job_id, Completion.model_validate(failed))

    def _ended(self, job_id: str) -> Completion | None:
        for answered, answer in self.answers:
            if answered == job_id:
                result = {"action": answer.action, "content": answer.content}
                return Completion(status="succeeded", result={**result, "reason": answer.reason})
        return None

    async def status(self, job_id: str) -> Completion:
        return self._ended(job_id) or self._asking(job_id)

    async def answer(self, job_id: str, answer: JobAnswer) -> None:
        if job_id not in self._cases:
            raise ToolError(f"no job {job_id}")
        if self._ended(job_id) is not None:
            return  # the first answer counts
        self.answers.append((job_id, answer))
        if job_id in self._callbacks:
            await self._report(job_id, self._ended(job_id) or self._asking(job_id))

    async def cancel(self, job_id: str) -> None:
        return None

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def ask_tool(
    backend: AskingJobs, completion: CompletionMode, policy: QuestionPolicy | None = None
) -> ToolSpec:
    """`ask_job`: a job that asks its question by webhook or when polled."""
    return ToolSpec(
        name="ask_job",
        description="Run a job that asks a question while it runs.",
        args=AskArgs,
        long=LongSpec(
            backend=backend,
            completion=completion,
            poll_interval=timedelta(seconds=0.5),
            input=policy or QuestionPolicy(),
        ),
    )


@dataclass
class _Deps:
    http: httpx.AsyncClient

    async def aclose(self) -> None:
        await self.http.aclose()


def _export(deps: _Deps) -> list[ToolSpec]:
    url = os.environ.get("DEMO_SYSTEMS_URL", "http://127.0.0.1:8790").rstrip("/")
    return [export_tool(ExportService(deps.http, url))]


app = App(
    scripts={
        "ask-schema": ask_in_the_tasks_schema,
        "ask-job": ask_job,
        "export-once": export_once,
    },
    tools=_export,
    deps=lambda: _Deps(httpx.AsyncClient(timeout=httpx.Timeout(30.0))),
)
