"""A long tool's backend that is never called: loading an app does not start jobs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from waitstate import Completion, Job, StartContext


class ExportArgs(BaseModel):
    """Arguments of the long tools of these apps."""

    dataset: str = Field(description="What to export.")


class IdleBackend:
    """Implements `LongTool`; fails loudly if anything calls it."""

    async def start(self, args: Any, context: StartContext) -> Job:
        raise AssertionError("loading an app must not start a job")

    async def status(self, job_id: str) -> Completion:
        raise AssertionError("loading an app must not check a job")

    async def cancel(self, job_id: str) -> None:
        raise AssertionError("loading an app must not cancel a job")
