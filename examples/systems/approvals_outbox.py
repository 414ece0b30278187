"""The approvals outbox: where runs post approval requests for people to read::

POST /approvals/outbox          any JSON object -> 201 {id}
GET  /approvals/outbox          [{id, index, received_at, body}], oldest first
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field


class OutboxPosted(BaseModel):
    """The answer to `POST /approvals/outbox`."""

    id: str


class OutboxEntry(BaseModel):
    """An approval request a run posted, as the outbox received it."""

    id: str
    index: int = Field(description="1 for the first entry received, then 2...")
    received_at: datetime
    body: dict[str, Any]


class Outbox:
    """The approval requests runs posted, oldest first."""

    def __init__(self) -> None:
        self.entries: list[OutboxEntry] = []

    def post(self, body: dict[str, Any]) -> OutboxEntry:
        """Record an approval request a run posted for people to read."""
        index = len(self.entries) + 1
        entry = OutboxEntry(
            id=f"out_{index}", index=index, received_at=datetime.now(UTC), body=body
        )
        self.entries.append(entry)
        return entry

    def reset(self) -> None:
        """Forget every entry."""
        self.entries.clear()


def router(outbox: Outbox) -> APIRouter:
    """The approvals outbox's routes."""
    routes = APIRouter()

    @routes.post("/approvals/outbox", status_code=201)
    async def post_to_outbox(body: dict[str, Any]) -> OutboxPosted:
        return OutboxPosted(id=outbox.post(body).id)

    @routes.get("/approvals/outbox")
    async def list_outbox() -> list[OutboxEntry]:
        return list(outbox.entries)

    return routes
