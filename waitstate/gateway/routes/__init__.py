"""The gateway's routes, one router per family: reports on operations, decisions on approval
requests, answers to questions, and health and metrics."""

from fastapi import APIRouter

from waitstate.gateway.routes import approvals, health, operations, questions

ROUTERS: tuple[APIRouter, ...] = (
    operations.router,
    approvals.router,
    questions.router,
    health.router,
)

__all__ = ["ROUTERS"]
