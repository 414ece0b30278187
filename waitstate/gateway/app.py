"""The webhook gateway: external systems report on long operations, and people decide on
approval requests, answer the questions operations' jobs ask, and talk in threads, here.

    POST /v1/operations/{operation_id}/complete      routes/operations.py
    POST /v1/approvals/{request_id}/decision         routes/requests.py
    POST /v1/questions/{question_id}/answer          routes/requests.py
    POST /v1/threads, .../{thread_id}/messages       routes/threads.py
    GET  /v1/threads/{thread_id}[/messages/{id}]     routes/threads.py
    GET  /v1/runs/{run_id}/events, POST .../view-link routes/events.py
    GET  /evals/{eval_id}[.json]                     routes/evals.py
    GET  /pages/inbox/evals/{eval_id}                routes/evals.py (the inbox's session)
    POST /agui/agents/{agent}                        routes/agui.py (AG-UI clients)
    GET  /healthz, GET /metrics                      routes/health.py

Every route does the same around its delivery (`gate`): it admits the request (body size,
token, body, cheapest first: bad input never reaches a run), delivers it to the run (see
`delivery`), then logs and counts what the run took. Every refusal is answered one way
(`refusals`), and no log line carries a token (`redaction`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from waitstate.auth.tokens import ResumeTokens
from waitstate.client import RunEvent
from waitstate.gateway import refusals
from waitstate.gateway.delivery import Deliverer
from waitstate.gateway.gate import SCHEMA_REF, Gate
from waitstate.gateway.routes import ROUTERS
from waitstate.gateway.streams import EventDesk
from waitstate.gateway.threads import MessageBody, ThreadDesk, ThreadStart
from waitstate.schemas.a2a_tasks import A2APush
from waitstate.schemas.approvals import DecisionBody
from waitstate.schemas.operations import Completion
from waitstate.schemas.questions import AnswerBody

DEFAULT_MAX_BODY_BYTES = 1_048_576

# The routes read their bodies themselves (to cap their size before parsing), so FastAPI does
# not know these models: the routes' `openapi_extra` refers to them (`gate.json_body`), and
# `_GatewayAPI` adds their schemas to the components.
_HAND_READ_BODIES: tuple[type[BaseModel], ...] = (
    Completion,
    DecisionBody,
    AnswerBody,
    ThreadStart,
    MessageBody,
    A2APush,
)
# What a route answers in a form FastAPI does not describe (an event stream's events).
_STREAMED: tuple[type[BaseModel], ...] = (RunEvent,)


class _GatewayAPI(FastAPI):
    def openapi(self) -> dict[str, Any]:
        schema = super().openapi()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (*_HAND_READ_BODIES, *_STREAMED):
            if model.__name__ not in components:
                body = model.model_json_schema(ref_template=SCHEMA_REF)
                components.update(body.pop("$defs", {}))
                components[model.__name__] = body
        return schema


def create_app(
    deliverer: Deliverer,
    tokens: ResumeTokens,
    *,
    threads: ThreadDesk | None = None,
    events: EventDesk | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The gateway's ASGI app.

    Args:
        deliverer: Hands verified completions, decisions and answers to runs
            (`TemporalDeliverer` in production).
        tokens: Verifies resume tokens, and mints and verifies thread tokens.
        threads: Starts threads and sends them people's messages (`ThreadDesk.from_settings`
            in production); None: the thread routes answer 404 `threads_disabled`.
        events: Reads runs' events for their streams (`EventDesk.from_settings` in
            production); None: the event routes answer 404 `events_disabled`.
        max_body_bytes: Larger bodies are refused with 413 before they are parsed.
        registry: Where its metrics go, served at /metrics (others may share it: the fleet's
            run counts); a registry of its own by default.
    """
    app = _GatewayAPI(
        title="waitstate gateway",
        version="1",
        description="External systems report on the long operations of agent runs, and people "
        "decide on their approval requests, answer their operations' questions, and talk with "
        "agents in threads, here.",
    )
    # A registry per app: two gateways in one process (tests) keep their own counts.
    registry = registry if registry is not None else CollectorRegistry()
    refusals.install(app, registry)
    app.state.gate = Gate.create(deliverer, tokens, max_body_bytes, registry, threads, events)
    for router in ROUTERS:
        app.include_router(router)
    return app
