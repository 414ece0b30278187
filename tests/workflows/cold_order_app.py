"""The demo's purge, whose job asks a person to confirm, with a 3 s window under each declared
outcome (`escalate`, `decline`, `cancel`), for a worker process: the cold-worker ordering tests
(test_cold_order.py) name the outcome's app, `tests.workflows.cold_order_app:<outcome>`."""

from __future__ import annotations

import os
from datetime import timedelta

import httpx

from examples.demo.app import DemoDeps
from examples.demo.purges import PurgeService, purge_tool
from tests.workflows.questions_app import purge
from waitstate import App, InputPolicy, ToolSpec
from waitstate.schemas.questions import InputTimeout

WINDOW = timedelta(seconds=3)


def _deps() -> DemoDeps:
    return DemoDeps(httpx.AsyncClient(timeout=30), os.environ["DEMO_SYSTEMS_URL"])


def _app(on_timeout: InputTimeout) -> App:
    def tools(deps: DemoDeps) -> list[ToolSpec]:
        policy = InputPolicy(timeout=WINDOW, on_timeout=on_timeout)
        return [purge_tool(PurgeService(deps.http, deps.systems_url), input=policy)]

    return App(scripts={"purge": purge}, tools=tools, deps=_deps)


escalate = _app("escalate")
decline = _app("decline")
cancel = _app("cancel")
