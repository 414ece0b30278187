"""Traces: one run's spans form one trace, from `starter.py run` to the answer, across a webhook
wait and a worker restart; model calls carry the GenAI conventions; no token or prompt is in a
span unless the operator opts in; tracing changes nothing a run records (histories replay)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

import waitstate.cli.main as starter
from examples.demo.purges import PurgeService, purge_tool
from examples.systems import DemoSystems
from examples.systems import create_app as systems_app
from tests.helpers import committed_history, eventually, quiet_history_length, start_run
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, Stack, serving_stack
from tests.workflows.questions_app import app as QUESTIONS
from waitstate.activation_order import workflow_runner
from waitstate.client import WaitstateClient
from waitstate.converter import DATA_CONVERTER
from waitstate.schemas import RunInput
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.questions import AnswerInput
from waitstate.schemas.run import DEFAULT_SYSTEM_PROMPT
from waitstate.settings import Settings, otlp_traces_endpoint
from waitstate.tracing import SERVICE_GATEWAY, SERVICE_STARTER, SERVICE_WORKER, Tracing
from waitstate.worker import build_providers, build_worker
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.served import WORKFLOWS

KEYS = {"trace": "t" * 40}
HISTORIES = Path(__file__).resolve().parent / "histories"
ROWS = 412_882
TASK = "What is 1234 * 5678?"


def _tracing(
    exporter: InMemorySpanExporter, service: str, instance: str = "1", *, content: bool = False
) -> Tracing:
    """A process's tracing, as `Tracing.from_settings` builds it, exporting to memory."""
    resource = Resource.create({SERVICE_NAME: service, "service.instance.id": instance})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider, content=content)


@asynccontextmanager
async def _traced_worker(
    stack: Stack, tracing: Tracing, *, purges: bool = False
) -> AsyncIterator[Worker]:
    """The production worker wiring (as `worker.py` builds it) of the stack, traced by
    `tracing`; with `purges`, the purge tool (a job that asks a person to confirm) and its
    scripts."""
    tools = stack.tools()
    if purges:
        tools.append(purge_tool(PurgeService(stack.http, stack.systems_url)))
    providers = build_providers(stack.settings, scripts=QUESTIONS.scripts if purges else None)
    worker = build_worker(
        stack.client,
        stack.settings,
        providers,
        tools,
        stack.http,
        tokens=stack.tokens,
        tracing=tracing,
    )
    try:
        async with worker:
            yield worker
    finally:
        await providers.aclose()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
async def traced_stack(
    dev_env: WorkflowEnvironment, task_queue: str, exporter: InMemorySpanExporter
) -> AsyncIterator[Stack]:
    """The stack, its gateway traced as `waitstate-gateway`."""
    traced = _tracing(exporter, SERVICE_GATEWAY).client(dev_env.client)
    systems = systems_app(export_seconds=0.2)
    async with serving_stack(
        dev_env.client, task_queue, KEYS, "trace", systems, gateway_client=traced
    ) as stack:
        yield stack


async def test_one_trace_from_the_start_to_the_answer_across_a_webhook_and_a_restart(
    traced_stack: Stack, exporter: InMemorySpanExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = traced_stack
    # The export's job waits for its webhook until the test sends it, as the external system
    # would, once the first worker is gone and the second one is up.
    await stack.faults(never_complete=True)
    run_id = f"traced-{uuid.uuid4()}"
    args = starter._parser().parse_args(
        ["run", EXPORT_TASK, "--tools", *EXPORT_TOOLS, "--id", run_id, "--wait", "--json"]
    )
    cli = _tracing(exporter, SERVICE_STARTER)
    handle = stack.client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)

    async with _traced_worker(stack, _tracing(exporter, SERVICE_WORKER, "1")):
        running = asyncio.create_task(starter.cmd_run(args, stack.settings, cli))
        job = await eventually(lambda: _job(stack.systems), "the export job")
        await quiet_history_length(handle)  # the run waits for the webhook
    restarted_at = time.time_ns()
    async with _traced_worker(stack, _tracing(exporter, SERVICE_WORKER, "2")):
        assert job.callback_url is not None and job.callback_token is not None
        file = f"exports/{job.arguments['dataset']}-{job.arguments['period']}.csv"
        stack.systems.files[file] = ROWS
        webhook = await stack.http.post(
            job.callback_url,
            json={"status": "succeeded", "result": {"file": file, "rows": ROWS}},
            headers={"Authorization": f"Bearer {job.callback_token}"},
        )
        assert webhook.status_code == 200, webhook.text
        code = await asyncio.wait_for(running, 60)
    answer = json.loads(capsys.readouterr().out)
    spans = exporter.get_finished_spans()

    assert code == 0 and answer["status"] == "completed", answer
    [root] = [s for s in spans if s.name == "invoke_agent"]
    assert root.parent is None and _service(root) == SERVICE_STARTER
    assert root.attributes is not None and root.attributes["waitstate.run.id"] == run_id
    trace = [s for s in spans if _trace_id(s) == _trace_id(root)]
    # Everything but the gateway's own delivery is in the run's trace; that one is linked.
    [delivery] = [s for s in spans if s not in trace]
    assert delivery.name == "StartWorkflowUpdate:complete_operation"
    assert _service(delivery) == SERVICE_GATEWAY
    [handled] = [s for s in trace if s.name == "HandleUpdate:complete_operation"]
    assert [link.context.span_id for link in handled.links] == [_span_id(delivery)]

    names = {s.name for s in trace}
    assert {
        "StartWorkflow:AgentRunWorkflow",
        "RunWorkflow:AgentRunWorkflow",
        "RunActivity:call_model",
        "chat demo",
        "RunActivity:call_tool",
        "execute_tool start_export",
        "execute_tool verify_row_count",
        "operation start_export",
        "CompleteWorkflow:AgentRunWorkflow",
    } <= names, names
    # Both workers took part, and the root span lasts from the start to the answer.
    instances = {_instance(s) for s in trace if _service(s) == SERVICE_WORKER}
    assert instances == {"1", "2"}
    assert root.end_time is not None
    assert all(s.end_time is not None and s.end_time <= root.end_time for s in trace)
    [complete] = [s for s in trace if s.name == "CompleteWorkflow:AgentRunWorkflow"]
    assert _instance(complete) == "2"

    # The wait: from the job's start (before the restart) to its webhook (after it).
    [wait] = [s for s in trace if s.name == "operation start_export"]
    [start] = [s for s in trace if s.name == "execute_tool start_export"]
    assert wait.attributes is not None and start.attributes is not None
    assert wait.start_time is not None and wait.end_time is not None
    assert wait.start_time < restarted_at < wait.end_time
    assert wait.attributes["waitstate.operation.status"] == "succeeded"
    assert wait.attributes["waitstate.operation.completion"] == "callback"
    assert wait.attributes["waitstate.operation.id"] == start.attributes["waitstate.operation.id"]
    assert wait.attributes["waitstate.operation.job_id"] == job.job_id
    assert _instance(wait) == "2" and _instance(start) == "1"
    assert start.attributes["gen_ai.operation.name"] == "execute_tool"
    assert start.attributes["gen_ai.tool.name"] == "start_export"

    # Model calls, per the GenAI semantic conventions.
    chats = [s for s in trace if s.name == "chat demo"]
    assert len(chats) == answer["usage"]["model_calls"] >= 3
    for chat in chats:
        attributes = dict(chat.attributes or {})
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "scripted"
        assert attributes["gen_ai.request.model"] == "demo"
        assert isinstance(attributes["gen_ai.usage.input_tokens"], int)
        assert isinstance(attributes["gen_ai.usage.output_tokens"], int)
        # The scripted model has no prompt cache: none of its input came from one.
        assert attributes["gen_ai.usage.cache_read.input_tokens"] == 0
        assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 0
        assert attributes["gen_ai.response.finish_reasons"]
        assert chat.parent is not None
        [activity] = [s for s in trace if s.context.span_id == chat.parent.span_id]
        assert activity.name == "RunActivity:call_model"
    tokens = [(c.attributes or {}).get("gen_ai.usage.input_tokens") for c in chats]
    assert sum(t for t in tokens if isinstance(t, int)) == answer["usage"]["input_tokens"]

    # No token, prompt or answer in any span by default.
    secrets = [job.callback_token, EXPORT_TASK, DEFAULT_SYSTEM_PROMPT[:40], answer["final_output"]]
    assert not _leaks(spans, secrets)

    # Tracing added no command: the run's history replays without the interceptor and with it,
    # and a replay traces nothing.
    history = await handle.fetch_history()
    before = len(exporter.get_finished_spans())
    for interceptors in ([], [cli.interceptor]):
        replayer = Replayer(
            workflow_runner=workflow_runner(),
            workflows=[AgentRunWorkflow],
            data_converter=DATA_CONVERTER,
            interceptors=interceptors,
        )
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, replayed.replay_failure
    assert len(exporter.get_finished_spans()) == before


async def test_content_goes_in_spans_only_when_the_operator_opts_in(
    traced_stack: Stack, exporter: InMemorySpanExporter
) -> None:
    stack = traced_stack
    worker = _tracing(exporter, SERVICE_WORKER, content=True)
    client = worker.client(stack.client)
    async with _traced_worker(stack, worker):
        handle = await start_run(
            client,
            stack.settings.task_queue,
            RunInput(task=TASK, tools=["calculate"]),
            workflow_id=f"traced-{uuid.uuid4()}",
        )
        result = await handle.result()
    spans = exporter.get_finished_spans()

    assert result.final_output
    assert _leaks(spans, [TASK, result.final_output])
    chat = next(s for s in spans if s.name == "chat demo")
    assert chat.attributes is not None
    assert "gen_ai.input.messages" in chat.attributes
    tool = next(s for s in spans if s.name == "execute_tool calculate")
    assert tool.attributes is not None and "gen_ai.tool.call.arguments" in tool.attributes


def _wait_span(spans: Sequence[ReadableSpan], name: str) -> tuple[ReadableSpan, Mapping[str, Any]]:
    """The run's start span, and the attributes of its one wait span `name`, after asserting
    that the wait is in the run's trace and ended after it began."""
    [start] = [s for s in spans if s.name == "StartWorkflow:AgentRunWorkflow"]
    [wait] = [s for s in spans if s.name == name]
    assert _trace_id(wait) == _trace_id(start)
    assert wait.attributes is not None
    assert wait.start_time is not None and wait.end_time is not None
    assert wait.end_time > wait.start_time
    return start, wait.attributes


async def test_an_approval_is_a_span_from_the_request_to_the_decision(
    traced_stack: Stack, exporter: InMemorySpanExporter
) -> None:
    stack = traced_stack
    cli = await WaitstateClient.connect(stack.settings, tracing=_tracing(exporter, SERVICE_STARTER))
    async with _traced_worker(stack, _tracing(exporter, SERVICE_WORKER)):
        started = await cli.start(
            RunInput(task="ask first", model="scripted:ask-first", tools=["request_approval"])
        )

        async def open_request() -> str | None:
            state = (await cli.status(started.run_id)).state
            return next((r.request_id for r in state.approvals.values() if r.open), None)

        request_id = await eventually(open_request, "the approval request")
        decision = DecideInput(request_id=request_id, decision="approve", reviewer="reviewer-7f3a")
        decided = await cli.decide(started.run_id, decision)
        state = await cli.outcome(started.run_id)
    spans = exporter.get_finished_spans()

    assert decided.accepted and state.status == "completed"
    start, wait = _wait_span(spans, "approval request_approval")
    assert wait["waitstate.approval.request_id"] == request_id
    assert wait["waitstate.approval.outcome"] == "approved"
    # The person's decision (an Update from the CLI) is linked from the run's handling of it.
    [sent] = [s for s in spans if s.name == "StartWorkflowUpdate:decide"]
    [handled] = [s for s in spans if s.name == "HandleUpdate:decide"]
    assert _trace_id(handled) == _trace_id(start)
    assert [link.context.span_id for link in handled.links] == [_span_id(sent)]
    # Reading the run's status (queries) is not traced.
    assert not [s for s in spans if "Query" in s.name]
    assert not _leaks(spans, ["reviewer-7f3a"])


async def test_a_question_is_a_span_from_the_ask_to_its_answer(
    traced_stack: Stack, exporter: InMemorySpanExporter
) -> None:
    stack = traced_stack
    cli = await WaitstateClient.connect(stack.settings, tracing=_tracing(exporter, SERVICE_STARTER))
    async with _traced_worker(stack, _tracing(exporter, SERVICE_WORKER), purges=True):
        started = await cli.start(
            RunInput(
                task="purge the staging events", model="scripted:purge", tools=["purge_dataset"]
            )
        )

        async def asked() -> str | None:
            state = (await cli.status(started.run_id)).state
            return next(
                (q.question_id for q in state.questions.values() if q.status == "open"), None
            )

        question_id = await eventually(asked, "the purge's question")
        answer = AnswerInput(
            question_id=question_id,
            action="accept",
            content={"confirm": True},
            responder="ana-5c1d",
        )
        answered = await cli.answer(started.run_id, answer)
        state = await cli.outcome(started.run_id)
    spans = exporter.get_finished_spans()

    assert answered.accepted and answered.delivered and state.status == "completed"
    _, wait = _wait_span(spans, "question purge_dataset")
    assert wait["waitstate.question.id"] == question_id
    assert wait["waitstate.question.outcome"] == "answered"
    assert wait["waitstate.question.answered_by"] == "person"
    assert not _leaks(spans, ["ana-5c1d"])


@pytest.mark.parametrize("name", sorted(p.stem for p in HISTORIES.glob("*.json")))
async def test_committed_histories_replay_with_tracing_on(
    name: str, exporter: InMemorySpanExporter
) -> None:
    tracing = _tracing(exporter, SERVICE_WORKER)
    history = committed_history(name, (HISTORIES / f"{name}.json").read_text())
    replayer = Replayer(
        workflow_runner=workflow_runner(),
        workflows=list(WORKFLOWS),
        data_converter=DATA_CONVERTER,
        interceptors=[tracing.interceptor],
    )

    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)

    assert result.replay_failure is None, f"{name}: {result.replay_failure}"
    assert exporter.get_finished_spans() == ()


def test_tracing_is_off_unless_an_endpoint_is_set() -> None:
    assert Tracing.from_settings(Settings.from_env({}), SERVICE_WORKER) is None
    assert otlp_traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}) == (
        "http://collector:4318/v1/traces"
    )
    traces = "http://collector:4318/custom"
    assert otlp_traces_endpoint({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces}) == traces
    disabled = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    assert otlp_traces_endpoint(disabled) is None
    settings = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    tracing = Tracing.from_settings(settings, SERVICE_GATEWAY)
    assert tracing is not None and not tracing.content
    resource = tracing.provider.resource.attributes
    assert resource[SERVICE_NAME] == SERVICE_GATEWAY
    tracing.provider.shutdown()  # nothing was recorded, so nothing is sent


# --- helpers -----------------------------------------------------------------------------------


async def _job(systems: DemoSystems) -> Any:
    return next((job for job in systems.jobs.values() if job.callback_token), None)


def _trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


def _span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def _service(span: ReadableSpan) -> Any:
    return span.resource.attributes.get(SERVICE_NAME)


def _instance(span: ReadableSpan) -> Any:
    return span.resource.attributes.get("service.instance.id")


def _leaks(spans: Sequence[ReadableSpan], secrets: Sequence[str]) -> list[str]:
    """Where any of `secrets` appears in a span: its name, attributes, events, links, status."""
    found = []
    for span in spans:
        texts = [span.name, span.status.description or ""]
        texts += [str(value) for value in (span.attributes or {}).values()]
        for event in span.events:
            texts += [event.name, *(str(v) for v in (event.attributes or {}).values())]
        for link in span.links:
            texts += [str(v) for v in (link.attributes or {}).values()]
        found += [f"{span.name}: {s[:30]}" for s in secrets if any(s in t for t in texts)]
    return found
