"""Spans of a run's waits, recorded by the worker's tracing interceptor when it has one.

Workflow code may neither keep a span open (a replay would never close it) nor import the
OpenTelemetry SDK, so a wait's span is made whole once the wait is over, by a function the
worker's interceptor (`waitstate.tracing`) hands the workflow. On a worker without tracing, or
while replaying, this does nothing; in no case does it add a command to the run's history.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from temporalio import workflow

from waitstate.names import WAIT_SPAN_FUNCTION


def wait_span(name: str, began: datetime, attributes: Mapping[str, str | int | bool]) -> None:
    """Record a span `name` from `began` to now, in the run's trace (if tracing is on)."""
    if workflow.unsafe.is_replaying():
        return
    record = workflow.extern_functions().get(WAIT_SPAN_FUNCTION)
    if record is None:
        return
    start_ns = int(began.timestamp() * 1_000_000) * 1000
    record(name, start_ns, workflow.time_ns(), dict(attributes))
