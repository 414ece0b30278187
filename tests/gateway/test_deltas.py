"""A model's text as it is written, end to end: the real gateway app served over HTTP with its
event desk, the dev server, a worker with the production wiring (the gateway's URL and the
token keys in its settings), and an `openai:` model answered by the local wire server, which
streams.

A reader of the run's stream gets the answer's text in `model.delta` events without ids, before
the call's `model.ended`; nothing of it goes into the run's history; and only the worker's
publish token for that very run gets a delta to the readers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from examples.systems import serving
from tests.helpers import make_worker
from waitstate.client import RunEvents
from waitstate.gateway.app import create_app
from waitstate.gateway.delivery import TemporalDeliverer
from waitstate.gateway.operators import OperatorKeys
from waitstate.gateway.streams import EventDesk
from waitstate.gateway.tokens import ResumeTokens
from waitstate.schemas import RunInput
from waitstate.settings import Settings
from waitstate.testing.wire_server import WireServer, delayed, openai_text
from workflows.agent_run import AgentRunWorkflow

KEYS = {"deltas": "d" * 40}
OPERATOR = "operator-key-0123456789abcdef0123456789"
WITHIN = 60.0  # far more than a run takes: only turns a hang into a failure
ANSWER = "Quarterly ledger reconciled; seventeen invoices matched, two await a signature."
# The wire server answers that late: the test's reader is on the run's stream by then.
ANSWER_DELAY = 1.5


@dataclass(frozen=True)
class Event:
    """One server-sent event as a reader gets it (`id` None: a delta)."""

    id: str | None
    kind: str
    data: dict[str, Any]


class _Reader:
    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def take(self, until: Callable[[Event], bool] | None = None) -> list[Event]:
        """The events up to the first `until` is true of (included), or to the stream's end."""
        taken: list[Event] = []
        fields: dict[str, str] = {}
        async with asyncio.timeout(WITHIN):
            async for line in self._lines:
                if line.startswith(":"):
                    continue
                if line:
                    name, _, value = line.partition(": ")
                    fields[name] = value
                    continue
                if "data" in fields:
                    data = json.loads(fields["data"])
                    taken.append(Event(fields.get("id"), fields["event"], data))
                    if until is not None and until(taken[-1]):
                        return taken
                fields = {}
        return taken


@dataclass
class Rig:
    client: Client
    http: httpx.AsyncClient
    gateway_url: str
    tokens: ResumeTokens
    task_queue: str
    wire: WireServer

    def worker(self) -> Any:
        settings = Settings(
            gateway_url=self.gateway_url,
            token_keys=KEYS,
            token_signing_key="deltas",
            openai_base_url=self.wire.openai_base_url,
            openai_api_key="test",
            model_deltas=True,
        )
        return make_worker(
            self.client, self.task_queue, tools=[], settings=settings, tokens=self.tokens
        )

    async def start(self, model: str) -> str:
        handle = await self.client.start_workflow(
            AgentRunWorkflow.run,
            RunInput(task="Reconcile the ledger.", tools=[], model=f"openai:{model}"),
            id=f"run-{uuid.uuid4()}",
            task_queue=self.task_queue,
        )
        return handle.id

    def events(self, run_id: str) -> Any:  # an async context manager of the streaming response
        return self.http.stream(
            "GET",
            f"{self.gateway_url}/v1/runs/{run_id}/events",
            headers={"Authorization": f"Bearer {OPERATOR}"},
        )

    async def post_delta(
        self, run_id: str, token: str | None, body: Any = None, **options: Any
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        if "content" not in options:
            options["json"] = body or {"turn": 1, "call": "probe", "text": "probe"}
        return await self.http.post(
            f"{self.gateway_url}/v1/runs/{run_id}/deltas", headers=headers, **options
        )


@pytest.fixture
async def rig(
    dev_env: WorkflowEnvironment, task_queue: str, wire: WireServer
) -> AsyncIterator[Rig]:
    tokens = ResumeTokens(KEYS, "deltas")
    desk = EventDesk(RunEvents(dev_env.client), tokens, OperatorKeys({"ops": OPERATOR}), "")
    gateway = create_app(TemporalDeliverer(dev_env.client), tokens, events=desk)
    async with httpx.AsyncClient(timeout=WITHIN) as http, serving(gateway) as gateway_url:
        desk.gateway_url = gateway_url
        yield Rig(dev_env.client, http, gateway_url, tokens, task_queue, wire)


def _in_an_hour() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


async def test_a_reader_gets_the_answer_as_it_is_written_and_history_keeps_none_of_it(
    rig: Rig,
) -> None:
    rig.wire.enqueue_for("gpt-stream", delayed(ANSWER_DELAY, openai_text(ANSWER)))
    async with rig.worker():
        run_id = await rig.start("gpt-stream")
        async with rig.events(run_id) as response:
            assert response.status_code == 200, await response.aread()
            reader = _Reader(response)
            # On the stream: the run's feed hands this reader what is published from now on.
            events = await reader.take(lambda e: e.kind == "run.started")
            events += await reader.take()
        handle = rig.client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
        result = await asyncio.wait_for(handle.result(), WITHIN)

    assert result.status == "completed" and result.final_output == ANSWER
    kinds = [e.kind for e in events]
    deltas = [e for e in events if e.kind == "model.delta"]
    assert deltas and "".join(d.data["text"] for d in deltas) == ANSWER
    # Each came before its call ended, and none has an id: a resumed reader never gets one.
    assert max(kinds.index("model.delta"), *(events.index(d) for d in deltas)) < kinds.index(
        "model.ended"
    )
    assert all(d.id is None for d in deltas)
    assert all(e.id is not None for e in events if e.kind != "model.delta")
    [call] = {d.data["call"] for d in deltas}  # one call, its first attempt
    assert call.endswith(".1")
    # The turn, where the run's input names it (runs on today's workflow leave it to the
    # activity's summary, which the activity does not see).
    assert {d.data["turn"] for d in deltas} <= {None, 1}
    # The streamed request asked for the usage, which the run counted as unstreamed.
    [asked] = [r.body for r in rig.wire.requests if r.body.get("model") == "gpt-stream"]
    assert asked["stream"] is True and asked["stream_options"] == {"include_usage": True}
    assert result.usage.input_tokens == 10 and result.usage.output_tokens == 5

    # History holds the answer where it always did, and no piece of it besides.
    history = await handle.fetch_history()
    recorded = "\n".join(str(event) for event in history.events)
    assert ANSWER in recorded and "model.delta" not in recorded
    for delta in deltas:
        assert recorded.count(delta.data["text"]) == recorded.count(ANSWER)


async def test_only_the_publish_token_of_the_run_gets_a_delta_to_its_readers(rig: Rig) -> None:
    rig.wire.enqueue_for("gpt-slow", delayed(ANSWER_DELAY, openai_text("done")))
    now = datetime.now(UTC)
    async with rig.worker():
        run_id = await rig.start("gpt-slow")
        own = rig.tokens.mint_publish(run_id, _in_an_hour())
        refused = {
            "missing": (None, 401, "missing_token"),
            "forged": ("x.y", 401, "invalid_token"),
            "view token": (rig.tokens.mint_view(run_id, _in_an_hour()), 401, "invalid_token"),
            "thread token": (rig.tokens.mint_thread(run_id, _in_an_hour()), 401, "invalid_token"),
            "another run's": (
                rig.tokens.mint_publish("run-other", _in_an_hour()),
                401,
                "wrong_run",
            ),
            "expired": (rig.tokens.mint_publish(run_id, now - timedelta(seconds=1)), 410, None),
            "other keys'": (
                ResumeTokens({"deltas": "z" * 40}, "deltas").mint_publish(run_id, _in_an_hour()),
                401,
                "invalid_token",
            ),
        }
        async with rig.events(run_id) as response:
            reader = _Reader(response)
            await reader.take(lambda e: e.kind == "run.started")
            answers = {
                why: await rig.post_delta(
                    run_id, token, {"turn": 1, "call": "probe", "text": f"forged {why}"}
                )
                for why, (token, _, _) in refused.items()
            }
            too_long = await rig.post_delta(
                run_id, own, {"turn": 1, "call": "probe", "text": "x" * 8_001}
            )
            too_big = await rig.post_delta(run_id, own, content=b"{" + b" " * 17_000 + b"}")
            # An oversize body is 413 whoever sends it, as at every route (the fuzzer's rule).
            too_big_foreign = await rig.post_delta(
                run_id, refused["another run's"][0], content=b"{" + b" " * 17_000 + b"}"
            )
            unknown_field = await rig.post_delta(
                run_id, own, {"turn": 1, "call": "probe", "text": "hi", "id": "run.9"}
            )
            taken = await rig.post_delta(run_id, own, {"turn": 1, "call": "probe", "text": "ok"})
            events = await reader.take()

    for why, (_, status, code) in refused.items():
        assert answers[why].status_code == status, (why, answers[why].text)
        if code is not None:
            assert answers[why].json()["error"]["code"] == code, why
    assert (too_long.status_code, too_long.json()["error"]["code"]) == (422, "invalid_delta")
    assert (too_big.status_code, too_big.json()["error"]["code"]) == (413, "body_too_large")
    assert too_big_foreign.status_code == 413
    assert unknown_field.status_code == 422
    assert taken.status_code == 202
    probes = [
        e.data["text"] for e in events if e.kind == "model.delta" and e.data["call"] == "probe"
    ]
    assert probes == ["ok"]  # the refused ones reached no reader


async def test_a_delta_for_a_run_nobody_reads_is_taken_and_dropped(rig: Rig) -> None:
    token = rig.tokens.mint_publish("run-unread", _in_an_hour())

    answer = await rig.post_delta("run-unread", token)

    assert answer.status_code == 202
