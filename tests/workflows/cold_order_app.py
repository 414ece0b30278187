"""Apps for a worker process, for the cold-worker ordering tests (test_cold_order.py), which name
one as `tests.workflows.cold_order_app:<name>`:

- `escalate`, `decline`, `cancel`: the demo's purge, whose job asks a person to confirm, with a
  3 s window under that declared outcome;
- `escalate_later`: the same with a 7 s window escalating (time for a query to wait on a dead
  worker's sticky queue before the window passes);
- `export`: the demo's export (a webhook's job) expiring 5 s after its start, checked only
  before it would expire."""

from __future__ import annotations

import os
from datetime import timedelta

import httpx

from examples.demo.app import DemoDeps
from examples.demo.exports import ExportService, export_tool
from examples.demo.purges import PurgeService, purge_tool
from tests.workflows.hostile_app import export_once
from tests.workflows.questions_app import purge
from waitstate import App, QuestionPolicy, ToolSpec
from waitstate.schemas.questions import InputTimeout

WINDOW = timedelta(seconds=3)
LATER = timedelta(seconds=7)
# Long enough for the run to wait quietly (its start answered) before the worker dies.
EXPIRY = timedelta(seconds=5)


def _deps() -> DemoDeps:
    return DemoDeps(httpx.AsyncClient(timeout=30), os.environ["DEMO_SYSTEMS_URL"])


def _app(on_timeout: InputTimeout, window: timedelta = WINDOW) -> App:
    def tools(deps: DemoDeps) -> list[ToolSpec]:
        policy = QuestionPolicy(timeout=window, on_timeout=on_timeout)
        return [purge_tool(PurgeService(deps.http, deps.systems_url), input=policy)]

    return App(scripts={"purge": purge}, tools=tools, deps=_deps)


def _exports(deps: DemoDeps) -> list[ToolSpec]:
    # No status checks while it runs: its one timer is the expiry's.
    service = ExportService(deps.http, deps.systems_url)
    return [export_tool(service, timeout=EXPIRY, reconcile_every=None)]


escalate = _app("escalate")
decline = _app("decline")
cancel = _app("cancel")
escalate_later = _app("escalate", LATER)
export = App(scripts={"export-once": export_once}, tools=_exports, deps=_deps)
