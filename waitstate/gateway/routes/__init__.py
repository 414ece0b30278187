"""The gateway's routes, one router per family: reports on operations, decisions on approval
requests, answers to questions, people's messages to threads, runs' events, and health and
metrics."""

from fastapi import APIRouter

from waitstate.gateway.routes import (
    approvals,
    events,
    health,
    operations,
    pages,
    questions,
    threads,
)

ROUTERS: tuple[APIRouter, ...] = (
    operations.router,
    approvals.router,
    questions.router,
    threads.router,
    events.router,
    pages.router,
    health.router,
)

__all__ = ["ROUTERS"]
