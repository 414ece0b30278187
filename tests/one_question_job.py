"""A jobs system of one job that asks one question, for the tests of a long tool's questions
(tests/activities/test_operations.py, tests/test_starter.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from waitstate import (
    Completion,
    InputPolicy,
    Job,
    JobAnswer,
    LongSpec,
    LongTool,
    Question,
    StartContext,
    ToolError,
    ToolSpec,
)


class OneQuestionJob(LongTool):
    """One job (`job_id`) that asks `question` until it is answered, then reports `answered`.
    Answers are kept in `answers`, the first one to a key only; one to another job is refused."""

    def __init__(self, job_id: str, question: Question, answered: Completion) -> None:
        self.job_id = job_id
        self.question = question
        self.answered = answered
        self.answers: list[JobAnswer] = []

    async def start(self, args: Any, context: StartContext) -> Job:
        return Job(job_id=self.job_id)

    async def status(self, job_id: str) -> Completion:
        if self.answers:
            return self.answered
        return Completion(status="input_required", questions=[self.question])

    async def cancel(self, job_id: str) -> None:
        return None

    async def answer(self, job_id: str, answer: JobAnswer) -> None:
        if job_id != self.job_id:
            raise ToolError(f"no job {job_id}")
        if not any(kept.key == answer.key for kept in self.answers):
            self.answers.append(answer)


class _NoArgs(BaseModel):
    pass


def asking_tool(job: OneQuestionJob, name: str) -> ToolSpec:
    """A tool `name` of no arguments whose long job is `job`, polled, its question a person's."""
    long = LongSpec(
        job,
        completion="poll",
        poll_interval=timedelta(seconds=0.2),
        input=InputPolicy(answered_by="person"),
    )
    return ToolSpec(name=name, description="A job that asks.", args=_NoArgs, long=long)
