"""Notifications to teams (it answers at once)::

POST /notifications             {team, message} -> {id}
GET  /notifications             every notification sent, oldest first
"""

from __future__ import annotations

import itertools

from fastapi import APIRouter
from pydantic import BaseModel, Field


class NotificationRequest(BaseModel):
    """`POST /notifications`."""

    team: str = Field(min_length=1, max_length=100)
    message: str = Field(min_length=1, max_length=10_000)


class Notification(BaseModel):
    """A notification that was sent."""

    id: str
    team: str
    message: str


class NotificationSent(BaseModel):
    """The answer to `POST /notifications`."""

    id: str


class Notifications:
    """The notifications sent, oldest first."""

    def __init__(self) -> None:
        self.sent: list[Notification] = []
        self._ids = itertools.count(1)

    def notify(self, request: NotificationRequest) -> Notification:
        """Record a notification."""
        notification = Notification(
            id=f"ntf_{next(self._ids)}", team=request.team, message=request.message
        )
        self.sent.append(notification)
        return notification

    def reset(self) -> None:
        """Forget every notification, and number them from 1 again."""
        self.sent.clear()
        self._ids = itertools.count(1)


def router(notifications: Notifications) -> APIRouter:
    """The notifications' routes."""
    routes = APIRouter()

    @routes.post("/notifications", status_code=201)
    async def send_notification(request: NotificationRequest) -> NotificationSent:
        return NotificationSent(id=notifications.notify(request).id)

    @routes.get("/notifications")
    async def list_notifications() -> list[Notification]:
        return list(notifications.sent)

    return routes
