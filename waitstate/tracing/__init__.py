"""Traces of runs with OpenTelemetry: one trace per run, from the client that starts it, through
its workflow and every model and tool call, across waits and worker restarts, to its answer.

On when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set: each process exports
its spans by OTLP (HTTP) under its own service name, `waitstate-worker`, `waitstate-gateway` or
`waitstate-starter`. Off otherwise: no interceptor, no spans (OpenTelemetry's SDK is loaded
with this module, about 0.04 s and 2 MB, and records nothing).

What the spans carry:

- Temporal's (`temporalio.contrib.opentelemetry`): the start of a run, its workflow, each
  activity, each signal and Update (the gateway's webhook deliveries and decisions are linked).
- Model calls, per the GenAI semantic conventions: `chat {model}` with
  `gen_ai.provider.name`, `gen_ai.request.model`, token usage and finish reasons.
- Tool calls: `execute_tool {tool}` with `gen_ai.tool.name` and `gen_ai.tool.call.id`, and the
  operation a long tool started.
- Waits: `operation {tool}` from a job's start to its end (with its id and outcome), and
  `approval {tool}` from the request to the decision (with its outcome).

Prompts, answers, tool arguments and results stay out of spans unless the operator opts in
(`WAITSTATE_TRACE_CONTENT=1`); secrets, resume tokens and HTTP headers never go in.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from waitstate.schemas import Message, ModelResponse, ToolResult
from waitstate.tracing._interceptor import WaitstateTracingInterceptor

if TYPE_CHECKING:
    from waitstate.settings import Settings

SERVICE_WORKER = "waitstate-worker"
SERVICE_GATEWAY = "waitstate-gateway"
SERVICE_STARTER = "waitstate-starter"
TRACER_NAME = "waitstate"
# How long a process that exits waits for its last spans to be exported.
FLUSH_TIMEOUT_MS = 5000

# GenAI semantic conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
# Of the input tokens (which count them, as the conventions ask): served by, written to the cache.
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
# Only with WAITSTATE_TRACE_CONTENT=1.
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
# Ours.
RUN_ID = "waitstate.run.id"
OPERATION_ID = "waitstate.operation.id"
JOB_ID = "waitstate.operation.job_id"
APPROVAL_NEEDED = "waitstate.tool.approval_needed"


class Tracing:
    """A process's tracing: the tracer its spans come from, the interceptor that carries the
    trace across Temporal, and whether spans may hold content (prompts, answers, arguments).

    Entry points build one with `from_settings` (None when tracing is off); tests build one
    over a tracer provider of their own.
    """

    def __init__(self, provider: TracerProvider, *, content: bool = False) -> None:
        self.provider = provider
        self.content = content
        self.tracer = provider.get_tracer(TRACER_NAME)
        self.interceptor: WaitstateTracingInterceptor = WaitstateTracingInterceptor(self.tracer)

    @classmethod
    def from_settings(cls, settings: Settings, service: str) -> Tracing | None:
        """OTLP export as `service` (or OTEL_SERVICE_NAME) if `settings.otlp_endpoint` is set,
        else None. The exporter reads the other OTEL_EXPORTER_OTLP_* variables (headers,
        timeout, certificates) itself; OTEL_RESOURCE_ATTRIBUTES are added to every span."""
        if settings.otlp_endpoint is None:
            return None
        resource = Resource.create({SERVICE_NAME: settings.otel_service_name or service})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint))
        )
        return cls(provider, content=settings.trace_content)

    def client(self, client: Client) -> Client:
        """`client` with the tracing interceptor: what it starts, signals and updates carries
        the current trace (a worker given this client traces its workflows and activities)."""
        config = client.config()
        config["interceptors"] = [*config["interceptors"], self.interceptor]
        return Client(**config)

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        kind: SpanKind | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> Iterator[Span]:
        """A span around the block, the current one inside it. An exception marks it failed
        with `error.type` (the message only with content on: it may quote the input)."""
        with self.tracer.start_as_current_span(
            name,
            kind=kind or SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as err:
                span.set_attribute(ERROR_TYPE, _error_type(err))
                span.set_status(Status(StatusCode.ERROR, str(err) if self.content else None))
                raise

    def shutdown(self) -> None:
        """Export what is left (waiting at most FLUSH_TIMEOUT_MS), then stop."""
        self.provider.force_flush(FLUSH_TIMEOUT_MS)
        self.provider.shutdown()


# --- what activities and the CLI record (each a no-op when tracing is off) -------------------


class ChatSpan:
    """One model call's span: its request and response, per the GenAI conventions."""

    def __init__(self, span: Span | None = None, content: bool = False) -> None:
        self._span = span
        self._content = content

    def request(self, system_prompt: str, messages: Sequence[Message]) -> None:
        """The prompt: recorded only with content on."""
        if self._span is None or not self._content:
            return
        self._span.set_attribute(
            SYSTEM_INSTRUCTIONS, json.dumps([{"type": "text", "content": system_prompt}])
        )
        self._span.set_attribute(INPUT_MESSAGES, json.dumps([_message(m) for m in messages]))

    def response(self, response: ModelResponse) -> None:
        """What came back: the model, token usage, finish reason (the answer with content on)."""
        if self._span is None:
            return
        self._span.set_attribute(INPUT_TOKENS, response.usage.input_tokens)
        self._span.set_attribute(OUTPUT_TOKENS, response.usage.output_tokens)
        self._span.set_attribute(CACHE_READ_TOKENS, response.usage.cached_input_tokens)
        self._span.set_attribute(CACHE_WRITE_TOKENS, response.usage.cache_write_input_tokens)
        if response.model:
            self._span.set_attribute(RESPONSE_MODEL, response.model)
        if response.stop_reason:
            self._span.set_attribute(FINISH_REASONS, [response.stop_reason])
        if self._content:
            self._span.set_attribute(OUTPUT_MESSAGES, json.dumps([_message(response.message)]))


class ToolSpan:
    """One tool call's span: what came of it (its arguments and result with content on)."""

    def __init__(
        self, span: Span | None = None, content: bool = False, operation_id: str | None = None
    ) -> None:
        self._span = span
        self._content = content
        self._operation_id = operation_id

    def arguments(self, arguments: str) -> None:
        if self._span is not None and self._content:
            self._span.set_attribute(TOOL_ARGUMENTS, arguments)

    def result(self, result: ToolResult) -> None:
        if self._span is None:
            return
        if result.operation is not None:
            if self._operation_id:
                self._span.set_attribute(OPERATION_ID, self._operation_id)
            self._span.set_attribute(JOB_ID, result.operation.job_id)
        if result.approval_needed is not None:
            self._span.set_attribute(APPROVAL_NEEDED, True)
        if result.is_error:
            self._span.set_attribute(ERROR_TYPE, "tool_error")
        if self._content:
            self._span.set_attribute(TOOL_RESULT, result.content)


@contextlib.contextmanager
def chat_span(tracing: Tracing | None, provider: str, model: str) -> Iterator[ChatSpan]:
    """The span of one model call (`chat {model}`), a client span of the activity's."""
    if tracing is None:
        yield ChatSpan()
        return
    attributes = {OPERATION: "chat", PROVIDER: provider, REQUEST_MODEL: model}
    with tracing.span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield ChatSpan(span, tracing.content)


@contextlib.contextmanager
def tool_span(
    tracing: Tracing | None, tool: str, call_id: str, operation_id: str | None = None
) -> Iterator[ToolSpan]:
    """The span of one tool call (`execute_tool {tool}`); `operation_id` is the operation it
    starts, should it be a long tool's."""
    if tracing is None:
        yield ToolSpan()
        return
    attributes: dict[str, AttributeValue] = {
        OPERATION: "execute_tool",
        TOOL_NAME: tool,
        TOOL_CALL_ID: call_id,
        TOOL_TYPE: "function",
    }
    with tracing.span(f"execute_tool {tool}", attributes=attributes) as span:
        yield ToolSpan(span, tracing.content, operation_id)


@contextlib.contextmanager
def run_span(
    tracing: Tracing | None, run_id: str, agent: str | None, model: str | None
) -> Iterator[Span | None]:
    """The span of a client's run of an agent (`invoke_agent`), from its start to the answer
    when the client waits for it: the root of the run's trace."""
    if tracing is None:
        yield None
        return
    attributes: dict[str, AttributeValue] = {
        OPERATION: "invoke_agent",
        CONVERSATION_ID: run_id,
        RUN_ID: run_id,
    }
    if agent:
        attributes[AGENT_NAME] = agent
    if model:
        attributes[REQUEST_MODEL] = model
    name = f"invoke_agent {agent}" if agent else "invoke_agent"
    with tracing.span(name, kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield span


def _message(message: Message) -> dict[str, Any]:
    """A message in the GenAI conventions' shape (role and parts)."""
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        )
    elif message.content:
        parts.append({"type": "text", "content": message.content})
    for call in message.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return {"role": message.role, "parts": parts}


def _error_type(err: BaseException) -> str:
    if isinstance(err, ApplicationError) and err.type:
        return err.type
    return type(err).__name__
