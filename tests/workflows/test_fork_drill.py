"""Forks and evaluations end to end on the dev server, the gateway and the demo systems over real
HTTP: 100 recorded demo runs (exports completed by webhook, arithmetic, refunds a person
approved, claim triages) forked under `recorded` with the same model reach no system, are sent
the recorded conversation message by message and answer as their originals did; with another
model they answer otherwise. An evaluation of 50 triages with a prompt asking for prose does not
hold; with the recorded prompt it does."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from bench.figures import bounded
from examples.demo.triage import PROSE_PROMPT, Triage
from tests.helpers import TEST_BLOBS
from tests.rigs import Stack
from tests.test_eval_cli import _cli
from waitstate.apps import load_apps
from waitstate.blobs import REF_PREFIX
from waitstate.blobs.local import LocalBlobStore
from waitstate.client import RunEnded, WaitstateClient
from waitstate.schemas import Message, ModelCallInput, RunInput, RunResult
from waitstate.schemas.approvals import DecideInput
from waitstate.settings import Settings

APP = "examples.demo.app:app"
WITHIN = 120.0
# Runs (and forks) in flight at once: the dev server and worker share two cores.
AT_ONCE = 16
CLAIMS = ("C-118", "C-200", "C-305", "C-999")
TRANSCRIPT = TypeAdapter(list[Message])


def _tasks() -> list[RunInput]:
    """100 demo runs: exports (each waits for its webhook), arithmetic, refunds over the
    approval threshold, and triages of each seeded claim."""
    exports = [
        RunInput(
            task=f"Export the transactions for Q{q % 4 + 1} 2025 to the compliance folder.",
            agent="demo",
        )
        for q in range(20)
    ]
    sums = [
        RunInput(task=f"What is {n} * {n + 1}? Then count the words.", agent="demo")
        for n in range(15)
    ]
    refunds = [
        RunInput(task="Refund claim C-305 $150 for the customer.", agent="demo") for _ in range(15)
    ]
    triages = [
        RunInput(task=f"Triage claim {CLAIMS[n % len(CLAIMS)]}.", agent="triage") for n in range(50)
    ]
    return [*exports, *sums, *refunds, *triages]


async def _result(stack: Stack, run_id: str, *, approve: bool = False) -> RunResult:
    """The run's result; with `approve`, deciding "approve" on each approval it asks for."""
    handle = stack.client.get_workflow_handle(run_id, result_type=RunResult)
    ending = asyncio.ensure_future(asyncio.wait_for(handle.result(), WITHIN))
    while approve and not ending.done():
        with contextlib.suppress(RunEnded):
            for request in await stack.waitstate.open_requests(run_id):
                decided = DecideInput(
                    request_id=request.request_id, decision="approve", reviewer="ana"
                )
                await stack.waitstate.decide(run_id, decided)
        await asyncio.wait([ending], timeout=0.3)
    return await ending


async def _ran(stack: Stack, run_input: RunInput) -> tuple[str, RunResult]:
    started = await stack.waitstate.start(run_input)
    approve = run_input.task.startswith("Refund")
    return started.run_id, await _result(stack, started.run_id, approve=approve)


async def _conversation(blobs: LocalBlobStore, request: ModelCallInput) -> list[Message]:
    """What a model call was sent: its stored transcript, then its new messages, read back."""
    earlier: list[Message] = []
    if request.transcript_ref is not None:
        ref = request.transcript_ref
        earlier = TRANSCRIPT.validate_json(
            await blobs.get(ref if ref.startswith(REF_PREFIX) else REF_PREFIX + ref)
        )
    new = [
        m.model_copy(
            update={"content": (await blobs.get(m.content_ref)).decode(), "content_ref": None}
        )
        if m.content_ref
        else m
        for m in request.new_messages
    ]
    return [*earlier, *new]


async def _same_prefix(client: WaitstateClient, run_id: str, fork_id: str, at: int) -> bool:
    """Whether the fork's first model call was sent, message by message, what the recorded
    run's call at turn `at` + 1 was."""
    blobs = LocalBlobStore(TEST_BLOBS)
    recorded, forked = await client.read_run(run_id), await client.read_run(fork_id)
    original = await _conversation(blobs, recorded.turns[at].request)
    fork = await _conversation(blobs, forked.turns[0].request)
    return len(original) == len(fork) > 0 and all(
        a == b for a, b in zip(original, fork, strict=True)
    )


@contextlib.asynccontextmanager
async def _demo(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[WaitstateClient]:
    monkeypatch.setenv("DEMO_SYSTEMS_URL", stack.systems_url)
    apps = load_apps([APP])
    async with stack.worker(tools=[], apps=apps), contextlib.aclosing(apps):
        yield stack.waitstate


async def test_100_recorded_demo_runs_forked_reach_no_system_and_are_sent_the_same_prefix(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    async with _demo(stack, monkeypatch) as client:
        tasks = _tasks()
        ran = await bounded(AT_ONCE, [lambda t=t: _ran(stack, t) for t in tasks])
        assert {result.status for _, result in ran} == {"completed"}, Counter(
            r.status for _, r in ran
        )
        recorded = await bounded(AT_ONCE, [lambda r=r: client.read_run(r) for r, _ in ran])
        received = Counter(stack.systems.requests)
        # Each kind of run reached its system: exports, lookups, refunds, files, notices.
        assert received["POST /exports"] == 20 and received["POST /refunds"] == 15
        assert received["POST /notifications"] == 20
        claims = sum(n for call, n in received.items() if call.startswith("GET /claims/"))
        assert claims == 15 + 50
        recorded_at = time.monotonic()

        # Forked at their last turn (even) or their first (odd), with the same model.
        ats = [len(run.turns) - 1 if n % 2 == 0 else 0 for n, run in enumerate(recorded)]

        async def fork(run_id: str, at: int) -> tuple[str, RunResult]:
            fork_id, _ = await client.fork(run_id, at=at)
            return fork_id, await _result(stack, fork_id)

        forks = await bounded(
            AT_ONCE, [lambda r=r, at=at: fork(r, at) for (r, _), at in zip(ran, ats, strict=True)]
        )
        forked_at = time.monotonic()
        assert stack.systems.requests == received  # not one call more, to any system
        same = [
            await _same_prefix(client, run_id, fork_id, at)
            for (run_id, _), (fork_id, _), at in zip(ran, forks, ats, strict=True)
        ]
        assert sum(same) == 100
        for (run_id, original), (fork_id, result) in zip(ran, forks, strict=True):
            assert (result.status, result.final_output) == (
                original.status,
                original.final_output,
            ), (run_id, fork_id)
            state = (await client.status(fork_id)).state
            assert state.fork is not None and state.fork.unavailable == [], fork_id

        # With another model (echo answers the task at once), or the triage asked for prose:
        # the answers differ, and still no system is called.
        sample = [ran[n] for n in (0, 1, 20, 21, 35, 36)]
        echoed = await bounded(
            AT_ONCE, [lambda r=r: _forked(stack, r, model="scripted:echo") for r, _ in sample]
        )
        for (_, original), result in zip(sample, echoed, strict=True):
            assert result.status == "completed" and result.final_output != original.final_output
        triages = ran[50:54]
        prose = await bounded(
            AT_ONCE, [lambda r=r: _forked(stack, r, instructions=PROSE_PROMPT) for r, _ in triages]
        )
        for (_, original), result in zip(triages, prose, strict=True):
            Triage.model_validate_json(original.final_output or "")
            assert (
                result.status == "output_invalid" and result.final_output != original.final_output
            )
        assert stack.systems.requests == received
    print(
        f"fork drill: {sum(received.values())} calls to the systems recorded, 0 by the forks; "
        f"{sum(same)}/100 prefixes identical; recorded in {recorded_at - began:.1f} s, "
        f"forked in {forked_at - recorded_at:.1f} s, all in {time.monotonic() - began:.1f} s"
    )


async def _forked(stack: Stack, run_id: str, **how: str) -> RunResult:
    fork_id, _ = await stack.waitstate.fork(run_id, **how)
    return await _result(stack, fork_id)


async def test_an_evaluation_of_50_triages_does_not_hold_with_a_prompt_asking_for_prose(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = Settings(
        temporal_address=stack.client.service_client.config.target_host,
        task_queue=stack.task_queue,
    )
    async with _demo(stack, monkeypatch):
        triages = [
            RunInput(task=f"Triage claim {CLAIMS[n % len(CLAIMS)]}.", agent="triage")
            for n in range(50)
        ]
        ran = await bounded(AT_ONCE, [lambda t=t: _ran(stack, t) for t in triages])
        runs = ",".join(run_id for run_id, _ in ran)
        received = Counter(stack.systems.requests)
        given = [
            "--runs",
            runs,
            "--threshold",
            "0.9",
            "--concurrency",
            "16",
            "--out",
            str(tmp_path),
        ]

        # `waitstate eval`, as a CI step runs it: the planted prompt fails it, exit 1.
        planted = await _cli(
            settings, "eval", *given, "--instructions", PROSE_PROMPT, "--id", "planted"
        )
        same = await _cli(settings, "eval", *given, "--id", "same")
        assert stack.systems.requests == received

    assert (planted, same) == (1, 0)
    report = json.loads((tmp_path / "planted.json").read_text())
    assert report["done"] and not report["holds"] and report["pass_rate"] < 0.9
    assert {row["new_status"] for row in report["rows"]} == {"output_invalid"}
    assert {s["name"] for row in report["rows"] for s in row["scores"]} == {"triage_valid"}
    assert "- verdict: **does not hold**" in (tmp_path / "planted.md").read_text()
    report = json.loads((tmp_path / "same.json").read_text())
    assert report["holds"] and report["passed"] == 50 and len(report["rows"]) == 50
    assert "- verdict: **holds**" in (tmp_path / "same.md").read_text()
    print(f"eval of 50 triages: pass rate {report['pass_rate']:.0%} as recorded, exit {same}")
