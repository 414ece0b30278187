"""Temporal's OpenTelemetry interceptor, with what waitstate adds: spans of a run's waits, and
no spans for status queries.

A process whose tracing is off builds none (`waitstate.tracing.Tracing`): no span is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import opentelemetry.trace
from opentelemetry.util.types import AttributeValue
from temporalio.client import OutboundInterceptor, QueryWorkflowInput
from temporalio.contrib.opentelemetry import TracingInterceptor, TracingWorkflowInboundInterceptor
from temporalio.worker import WorkflowInterceptorClassInput

from waitstate.names import WAIT_SPAN_FUNCTION


class WaitstateTracingInterceptor(TracingInterceptor):
    """`TracingInterceptor` for clients and workers, plus:

    - `workflows.traces.wait_span`: a run's workflow code records a span of a wait (an
      operation from its start to its end, an approval request to its decision) once the wait
      is over, with its true start and end. Temporal's own `completed_span` can only make spans
      of no duration, since a span left open is not replay-safe; a span made whole at the end is.
    - Queries are not traced: `starter.py run --wait` reads a run's status four times a second,
      which would bury the run's trace (or make a trace per read) in spans saying nothing.
    """

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _UntracedQueries(super().intercept_client(next), next)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[TracingWorkflowInboundInterceptor]:
        input.unsafe_extern_functions[WAIT_SPAN_FUNCTION] = self._wait_span
        return super().workflow_interceptor_class(input)

    def _wait_span(
        self, name: str, start_ns: int, end_ns: int, attributes: Mapping[str, AttributeValue]
    ) -> None:
        # Called synchronously from workflow code (never on replay), so the current context is
        # the run's: the workflow interceptor attached it, from the headers of the run's start.
        # Without one (a run started by an untraced client) there is no trace to add to.
        if not opentelemetry.trace.get_current_span().get_span_context().is_valid:
            return
        span = self.tracer.start_span(name, attributes=attributes, start_time=start_ns)
        span.end(end_time=end_ns)


class _UntracedQueries(OutboundInterceptor):
    """Every call through the tracing interceptor except queries, which skip it."""

    def __init__(self, traced: OutboundInterceptor, untraced: OutboundInterceptor) -> None:
        super().__init__(traced)
        self._untraced = untraced

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        return await self._untraced.query_workflow(input)
