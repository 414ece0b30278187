"""The gateway's routes, one router per family: reports on operations (and remote A2A agents'
pushes about theirs), people's replies to their requests (decisions on approval requests,
answers to questions), people's messages to threads, runs' events, the pages a person opens (an
approval's or a question's link, a run's timeline, the operators' inbox, an evaluation's
report), agents served to AG-UI clients, and health and metrics."""

from fastapi import APIRouter

from waitstate.gateway.routes import (
    a2a_push,
    agui,
    evals,
    events,
    health,
    inbox,
    operations,
    pages,
    requests,
    threads,
    timeline,
)

ROUTERS: tuple[APIRouter, ...] = (
    operations.router,
    a2a_push.router,
    requests.router,
    threads.router,
    events.router,
    pages.router,
    timeline.router,
    inbox.router,
    evals.router,
    agui.router,
    health.router,
)

__all__ = ["ROUTERS"]
