"""A run's events over HTTP, end to end: the real gateway app served over HTTP with its event
desk, the dev server, a worker with the production wiring, and the demo systems (the export
service never finishes its jobs on its own: the test reports on them through the gateway).

A view link follows one run as it goes, from its start to its end, and nothing else; a reader
that lost its connection resumes after the last event it had, and is told (204) when there is
nothing more to come. Every refusal is the gateway's error shape with its code.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from examples.demo.basic import demo_tools
from tests.helpers import eventually
from tests.rigs import (
    EXPORT_TASK,
    EXPORT_TOOLS,
    OPERATOR,
    REFUND_TASK,
    REFUND_TOOLS,
    EventReader,
    ServerEvent,
    Stack,
    bearer,
    serving_stack,
)
from waitstate.auth.tokens import ResumeTokens
from waitstate.client import Position, RunEvent, RunEvents, WaitstateClient

KEYS = {"events": "e" * 40}
WITHIN = 60.0  # far more than a run takes: only turns a hang into a failure


@pytest.fixture
async def rig(dev_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Stack]:
    async with serving_stack(
        dev_env.client, task_queue, KEYS, "events", events=True, within=WITHIN
    ) as stack:
        await stack.faults(never_complete=True)
        yield stack


async def _collect(
    response: httpx.Response, until: Callable[[ServerEvent], bool] | None = None
) -> list[ServerEvent]:
    return await EventReader(response, WITHIN).take(until)


def _order(events: list[ServerEvent]) -> list[tuple[str, int]]:
    return [(e.id.split(".")[0], int(e.id.split(".")[1])) for e in events]


async def test_a_view_link_follows_a_run_through_its_approval_to_its_end(rig: Stack) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        link = await rig.view_link(handle.id)
        async with rig.events(link["events_url"]) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            reader = EventReader(response, WITHIN)
            before = await reader.take(lambda e: e.kind == "approval.notice.ended")
            # The run waits for a person: the stream is still open. A person approves.
            approved = await rig.approve_by_link(await rig.notice(handle.id))
            assert approved.status_code == 200, approved.text
            after = await reader.take()
        result = await asyncio.wait_for(handle.result(), WITHIN)

    events = before + after
    kinds = [e.kind for e in events]
    assert result.status == "completed"
    assert kinds[0] == "run.started" and kinds[-1] == "run.completed"
    # What a person follows, in the order it happened.
    assert _subsequence(
        [
            "run.started",
            "model.started",
            "model.ended",
            "tool.started",
            "tool.ended",
            "approval.notice.started",
            "approval.notice.ended",
            "approval.decided",
            "update.completed",
            "tool.started",
            "tool.ended",
            "model.ended",
            "run.completed",
        ],
        kinds,
    )
    decided = next(e for e in events if e.kind == "approval.decided")
    assert (decided.data["detail"]["decision"], decided.data["detail"]["reviewer"]) == (
        "approve",
        "ana",
    )
    assert "nonce" not in decided.data["detail"] and "comment" not in decided.data["detail"]
    tools = [e.data["summary"] for e in events if e.kind == "tool.started"]
    # The refund asks for approval when first called, and is called again once approved.
    assert tools == ["tool check_claim", "tool issue_refund", "tool issue_refund"]
    waiting = [e.data["detail"].get("WaitingFor") for e in events if e.kind == "status"]
    assert "approval" in waiting
    # One run, its events in the order of its history, each once.
    order = _order(events)
    assert len({run for run, _ in order}) == 1
    assert [n for _, n in order] == sorted({n for _, n in order})

    # A reader that lost its connection resumes after the last event it had: the rest, as is.
    middle = events[len(events) // 2]
    async with rig.events(link["events_url"], headers={"Last-Event-ID": middle.id}) as response:
        rest = await _collect(response)
    assert rest == events[len(events) // 2 + 1 :]
    # After the last event of a run that ended, there is nothing more: 204 (an EventSource
    # stops reconnecting).
    ended = await rig.http.get(link["events_url"], headers={"Last-Event-ID": events[-1].id})
    assert ended.status_code == 204


async def test_an_operations_progress_reaches_its_reader_as_it_is_reported(rig: Stack) -> None:
    async with rig.worker():
        handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS)
        async with rig.events(
            f"{rig.gateway_url}/v1/runs/{handle.id}/events",
            headers=bearer(OPERATOR),  # an operator reads any run
        ) as response:
            reader = EventReader(response, WITHIN)
            await reader.take(lambda e: e.kind == "tool.ended")
            job = await rig.job(handle.id)
            auth = {"Authorization": f"Bearer {job.callback_token}"}
            reported = []
            for progress in ("40%", "80%"):
                sent = await rig.http.post(
                    job.callback_url, json={"status": "running", "progress": progress}, headers=auth
                )
                assert sent.status_code == 200, sent.text
                *_, report = await reader.take(lambda e: e.kind == "operation.reported")
                reported.append(report.data["detail"])
            done = await rig.http.post(
                job.callback_url,
                json={"status": "succeeded", "result": {"file": "x.csv", "rows": 7}},
                headers=auth,
            )
            assert done.status_code == 200, done.text
            rest = await reader.take()
        await asyncio.wait_for(handle.result(), WITHIN)

    assert [(r["status"], r["progress"]) for r in reported] == [
        ("running", "40%"),
        ("running", "80%"),
    ]
    assert "result" not in reported[0]
    assert [e.kind for e in rest if e.kind == "operation.reported"] == ["operation.reported"]
    assert rest[-1].kind == "run.completed"


async def test_a_call_tried_again_reaches_its_readers_as_each_attempt_fails(
    rig: Stack, closed_port: int
) -> None:
    # The model's server is away: each attempt fails. No history event tells an attempt (the
    # call's end is written once it ends), but the run's readers see each as it comes.
    away = f"http://127.0.0.1:{closed_port}/v1"
    async with rig.worker(tools=demo_tools(), openai_base_url=away, openai_api_key="test-key"):
        handle = await rig.start("hello", [], model="openai:any-name")
        try:
            link = await rig.view_link(handle.id)
            async with rig.events(link["events_url"]) as response:
                taken = await _collect(
                    response, lambda e: e.kind == "retry" and e.data["attempt"] >= 3
                )
            # What is never kept is never sent again: a reader that resumes from the run's
            # start gets its events, and none of the attempts told before it came.
            start = f"{next(e for e in taken if e.id).id.split('.')[0]}.0"
            async with rig.events(link["events_url"], headers={"Last-Event-ID": start}) as again:
                resumed = await _collect(again, lambda e: e.kind == "model.started")
        finally:
            await handle.terminate("test over")

    retries = [e for e in taken if e.kind == "retry"]
    attempts = [e.data["attempt"] for e in retries]
    # Each attempt told once, in order, with what it failed with but not the error's text.
    assert attempts == sorted(set(attempts)) and attempts[0] >= 2 and attempts[-1] >= 3
    assert all(e.id == "" for e in retries)
    told = {(e.data["call"], e.data["error_type"], e.data["maximum_attempts"]) for e in retries}
    assert told == {("model call", "ModelUnavailable", 8)}
    assert all("Connection" not in json.dumps(e.data) for e in retries)
    # Between the call's start and its end (which has not come): after `model.started`.
    kinds = [e.kind for e in taken]
    assert kinds.index("model.started") < kinds.index("retry")
    assert [e.kind for e in resumed] == [e.kind for e in taken if e.id][: len(resumed)]
    assert "retry" not in [e.kind for e in resumed]


async def test_a_view_token_opens_its_own_runs_events_only(rig: Stack) -> None:
    async with rig.worker():
        a = await rig.start(REFUND_TASK, REFUND_TOOLS)
        b = await rig.start(REFUND_TASK, REFUND_TOOLS)
        a_link, b_link = await rig.view_link(a.id), await rig.view_link(b.id)
        url = f"{rig.gateway_url}/v1/runs/{a.id}/events"
        soon = datetime.now(UTC) + timedelta(hours=1)
        token = a_link["token"]
        other_key = ResumeTokens({"events": "x" * 40}, "events")
        refused = {
            "no token": (url, {}),
            "b's token": (f"{url}?token={b_link['token']}", {}),
            "forged": (f"{url}?token={token[:-2]}AA", {}),
            "another key's": (f"{url}?token={other_key.mint_view(a.id, soon)}", {}),
            "a thread token": (f"{url}?token={rig.tokens.mint_thread(a.id, soon)}", {}),
            "expired": (f"{url}?token={rig.tokens.mint_view(a.id, datetime.now(UTC))}", {}),
            "unknown run": (f"{rig.gateway_url}/v1/runs/run-none/events", bearer(OPERATOR)),
            "bad position": (url, bearer(OPERATOR) | {"Last-Event-ID": "not-an-id"}),
            "b's run's position": (url, bearer(OPERATOR) | {"Last-Event-ID": f"{await _run(b)}.3"}),
        }
        answers = {
            what: (r.status_code, r.json()["error"]["code"])
            for what, (target, headers) in refused.items()
            for r in [await rig.http.get(target, headers=headers)]
        }
        no_key = await rig.http.post(f"{rig.gateway_url}/v1/runs/{a.id}/view-link")
        a_token_for_link = await rig.http.post(
            f"{rig.gateway_url}/v1/runs/{a.id}/view-link",
            headers={"Authorization": f"Bearer {token}"},
        )

    assert answers == {
        "no token": (401, "missing_token"),
        "b's token": (401, "wrong_run"),
        "forged": (401, "invalid_token"),
        "another key's": (401, "invalid_token"),
        "a thread token": (401, "invalid_token"),
        "expired": (410, "token_expired"),
        "unknown run": (404, "run_not_found"),
        "bad position": (400, "bad_position"),
        "b's run's position": (404, "run_not_found"),
    }
    # A view token reads; it hands out no links (an operator key does).
    assert (no_key.status_code, no_key.json()["error"]["code"]) == (401, "missing_operator_key")
    assert a_token_for_link.json()["error"]["code"] == "invalid_operator_key"
    assert a_link["events_url"] == f"{rig.gateway_url}/v1/runs/{a.id}/events?token={token}"
    assert a_link["url"] == f"{rig.gateway_url}/pages/runs/{a.id}?token={token}"
    assert rig.tokens.verify_view(token).run_id == a.id


async def test_a_gateway_that_stops_ends_its_streams_and_its_readers_resume_where_they_were(
    rig: Stack,
) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        link = await rig.view_link(handle.id)
        async with rig.events(link["events_url"]) as response:
            reader = EventReader(response, WITHIN)
            before = await reader.take(lambda e: e.kind == "approval.notice.ended")
            rig.event_desk.closing.set()  # what the gateway does as it stops
            cut = await reader.take()
        rig.event_desk.closing = asyncio.Event()  # a gateway started again
        await rig.approve_by_link(await rig.notice(handle.id))
        last = (before + cut)[-1].id
        async with rig.events(link["events_url"], headers={"Last-Event-ID": last}) as response:
            after = await EventReader(response, WITHIN).take()
        async with rig.events(link["events_url"]) as response:
            whole = await EventReader(response, WITHIN).take()

    assert rig.event_desk.open_streams == 0
    assert "run.completed" not in [e.kind for e in before + cut]
    # Nothing lost, nothing twice: the pieces are the run's whole stream.
    assert before + cut + after == whole
    assert whole[-1].kind == "run.completed"


async def test_follow_looks_at_a_run_as_its_history_grows_not_at_its_interval(rig: Stack) -> None:
    client = WaitstateClient(rig.client, task_queue=rig.task_queue)
    looks: list[list[str]] = []
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        async with asyncio.timeout(WITHIN):  # far less than the interval: only wakes come
            async for progress in client.follow(
                handle.id, retries=False, interval=timedelta(minutes=10)
            ):
                looks.append([step.kind for step in progress.steps])
                state = progress.state
                if state is not None and any(r.open for r in state.approvals.values()):
                    await rig.approve_by_link(await rig.notice(handle.id))
                if progress.outcome is not None:
                    outcome = progress.outcome
                    break

    assert outcome.status == "completed"
    assert len(looks) > 2
    assert "tool" in [kind for look in looks for kind in look]


async def _run(handle: WorkflowHandle[Any, Any]) -> str:
    return (await handle.describe()).run_id


def _subsequence(wanted: list[str], kinds: list[str]) -> bool:
    found = iter(kinds)
    return all(kind in found for kind in wanted)


class _Gated:
    """A workflow that waits for a person's `go` (a signal) somewhere in its run."""

    def __init__(self) -> None:
        self._go = False

    @workflow.signal
    def go(self) -> None:
        self._go = True


@workflow.defn(sandboxed=False)
class Hops(_Gated):
    """Waits for a `go`, then continues as new with one hop fewer, until none is left."""

    @workflow.update
    def refused(self) -> None:
        pass

    @refused.validator
    def _never(self) -> None:
        raise ValueError("refused, always")

    @workflow.run
    async def run(self, hops: int) -> int:
        await workflow.wait_condition(lambda: self._go)
        if hops == 0:
            return 0
        workflow.continue_as_new(hops - 1)


@asynccontextmanager
async def _hops(
    env: WorkflowEnvironment, task_queue: str, hops: int
) -> AsyncIterator[WorkflowHandle[Any, int]]:
    """A `Hops` run of `hops` hops, on a worker of its own while the block runs."""
    async with Worker(env.client, task_queue=task_queue, workflows=[Hops]):
        yield await env.client.start_workflow(
            Hops.run, hops, id=f"hops-{uuid.uuid4()}", task_queue=task_queue
        )


async def test_a_reader_follows_a_run_into_the_runs_it_continues_as(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    events = RunEvents(dev_env.client)
    async with _hops(dev_env, task_queue, 1) as handle:
        start, more = await events.where(handle.id, None)
        followed, following = await _following(events, handle.id, start)
        for _ in range(2):
            signalled = len([e for e in followed if e.kind == "signal"])
            await handle.signal(Hops.go)
            await eventually(
                _async(lambda n=signalled: len([e for e in followed if e.kind == "signal"]) > n),
                "the signal's event",
            )
        await asyncio.wait_for(following, WITHIN)  # the stream ends with the chain
        # Resumed in the first run: the rest of it, then the next run, as the first reader saw.
        resumed = [e async for e in events.follow(handle.id, Position.parse(followed[1].id))]
        second = (await handle.describe()).run_id

    kinds = [e.kind for e in followed]
    assert more
    assert kinds == [
        "run.started",
        "signal",
        "run.continued",
        "run.started",
        "signal",
        "run.completed",
    ]
    first = start.run
    assert [e.id.split(".")[0] for e in followed] == [first] * 3 + [second] * 3
    assert followed[2].detail == {"next_run": second}
    assert followed[3].detail["continued_from"] == first
    assert resumed == followed[2:]
    # After the chain's last event: nothing more to send (the route answers 204).
    assert await events.where(handle.id, Position.parse(followed[-1].id)) == (
        Position.parse(followed[-1].id),
        False,
    )


async def test_an_update_refused_by_its_validator_loses_no_event_of_those_written_after_it(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # A refused Update's workflow task is speculative: Temporal sends its events after the
    # written ones while it runs, then drops them, and the next events written take their ids.
    events = RunEvents(dev_env.client)
    async with _hops(dev_env, task_queue, 0) as handle:
        followed, following = await _following(events, handle.id)
        await eventually(_async(lambda: bool(followed)), "the run's start")
        for _ in range(3):
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update(Hops.refused)
        await handle.signal(Hops.go)
        await asyncio.wait_for(following, WITHIN)

    assert [e.kind for e in followed] == ["run.started", "signal", "run.completed"]


# Whether Breaks' workflow tasks fail (a bug shipped, then fixed): its tasks are then retried,
# each retry a transient workflow task that Temporal writes only once it completes.
BROKEN = {"now": False}
RELEASE = asyncio.Event()


@activity.defn(name="held")
async def held() -> None:
    await RELEASE.wait()


@workflow.defn(sandboxed=False)
class Breaks(_Gated):
    """Starts a held activity, takes a `go`, and ends once the activity did."""

    @workflow.run
    async def run(self) -> None:
        held_call = workflow.start_activity("held", start_to_close_timeout=timedelta(minutes=1))
        await workflow.wait_condition(lambda: self._go)
        if BROKEN["now"]:
            time.sleep(1.5)  # noqa: ASYNC251 - a slow bug: each try is in flight a while
            raise RuntimeError("a bug: this workflow task fails, and is retried")
        await held_call


async def test_an_event_written_while_a_workflow_task_is_retried_is_not_lost(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # While a failed workflow task is retried, Temporal sends the retry's events after the
    # written ones; an event written meanwhile (the activity's end) takes their ids.
    events = RunEvents(dev_env.client)
    RELEASE.clear()
    BROKEN["now"] = True
    async with Worker(dev_env.client, task_queue=task_queue, workflows=[Breaks], activities=[held]):
        handle = await dev_env.client.start_workflow(
            Breaks.run, id=f"breaks-{uuid.uuid4()}", task_queue=task_queue
        )
        await eventually(lambda: _scheduled(handle), "the activity's start")
        await handle.signal(Breaks.go)
        # Two tries fail and are written; from the third on, a try in flight is sent after
        # the written events, unwritten. The reader starts then: its first page ends with it.
        in_flight = await eventually(
            lambda: _retry_in_flight(handle), "a workflow task's third try"
        )
        followed, following = await _following(events, handle.id)
        await eventually(_async(lambda: "signal" in _kinds(followed)), "the signal")
        RELEASE.set()  # the activity ends, written where the try in flight was
        ended = await eventually(lambda: _activity_ended(handle), "the activity's end written")
        BROKEN["now"] = False  # the fix is deployed
        await asyncio.wait_for(following, WITHIN)

    # The race this is about: the activity's end (its start is written with it) took the ids
    # of the try in flight.
    assert ended == [in_flight, in_flight + 1]
    assert _kinds(followed) == [
        "run.started",
        "activity.started",
        "signal",
        "activity.ended",
        "run.completed",
    ]


async def _scheduled(handle: WorkflowHandle[Any, Any]) -> bool:
    kinds = [e.event_type async for e in handle.fetch_history_events()]
    return EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED in kinds


async def _retry_in_flight(handle: WorkflowHandle[Any, Any]) -> int | None:
    """The first event id of a workflow task's try in flight, unwritten, that the history's
    last page ends with (after two failed tries were written); None if it does not."""
    events = [e async for e in handle.fetch_history_events()]
    failed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    if len(failed) < 2 or events[-1].event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
        return None
    return int(events[-2].event_id)  # its scheduling, then its start


async def _activity_ended(handle: WorkflowHandle[Any, Any]) -> list[int] | None:
    """The event ids of the activity's start and completion, once written (together)."""
    ids = {
        e.event_type: int(e.event_id)
        async for e in handle.fetch_history_events()
        if e.event_type
        in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        )
    }
    if EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED not in ids:
        return None
    return [
        ids[EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED],
        ids[EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED],
    ]


async def _following(
    events: RunEvents, workflow_id: str, start: Position | None = None
) -> tuple[list[RunEvent], asyncio.Task[None]]:
    """Follow the run's events from `start` (its first, by default) in a task: the list it
    appends each event to as it reads it, and the task (it ends with the run's chain)."""
    if start is None:
        start, _ = await events.where(workflow_id, None)
    followed: list[RunEvent] = []

    async def follow() -> None:
        async for event in events.follow(workflow_id, start):
            followed.append(event)

    return followed, asyncio.create_task(follow())


def _kinds(events: list[RunEvent]) -> list[str]:
    return [e.kind for e in events]


def _async(check: Callable[[], bool]) -> Callable[[], Any]:
    async def checked() -> bool:
        return check()

    return checked
