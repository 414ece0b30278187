"""Outcomes of real chaos runs, recorded once for the checker tests: each what the suite's
driver handed the invariants (chaos.runs.RunOutcome: the plan, the state it queried, the
history of every run of the chain, what each sender was told), and the systems' records
(`/_test/stats` of the demo systems and of the MCP server, the MCP tasks' states, the refunds
issued), as `chaos.driver.Suite` gathers them; with each run what a reader of its event stream
got through the gateway, and for a model-fault run the requests the model server received. The
checker tests plant one violation in a copy of one of them, so what a checker is shown is what
the suite really reads, but the plant.

Recorded on a chaos stack (chaos.stack: the dev server, gateway, demo systems, workers and the
demo's MCP server, as processes) with no faults injected, the runs driven by `chaos.runs.drive`
as the suite drives them:

    .venv/bin/python -m tests.chaos_checks.recorded [NAME...]

It writes `outcomes/<name>.json` per run and `outcomes/stats.json`, and refuses to write any
that breaks an invariant or its check (they are the passing side of every check). Given names,
it records those runs only, and adds their systems' records to the others' (every record is
under its run's id).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import random
import sys
from functools import cache
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import WorkflowHistory

from chaos import exactly_once
from chaos.driver import (
    MODEL_FAULTS,
    _short_timeouts,
    _stats,
    _task_states,
    fault_the_systems,
    stack_context,
)
from chaos.invariants import check_model_fault, check_run
from chaos.runs import (
    Answer,
    Outbox,
    RunOutcome,
    RunPlan,
    _ask_first,
    _ask_timeout,
    _export,
    _mcp_task,
    cancel_plan,
    drive,
    model_plan,
    question_plans,
)
from chaos.sizes import SIZES
from chaos.stack import Stack
from chaos.streams import StreamRead
from chaos.streams import check as streams_check
from chaos.streams import expected as streams_expected
from waitstate.schemas import RunInput, RunState
from waitstate.testing.wire_server import RecordedRequest

OUTCOMES = Path(__file__).resolve().parent / "outcomes"
STATS = "stats"
SEED = 38
PREFIX = "chaos-r"


def plans() -> dict[str, RunPlan]:
    """The runs recorded, by name: one of each kind the invariants read something particular
    of (a callback job's reports, a person's decisions and a duplicate, the timeout policy, a
    cancel and late completions, expiry, continue-as-new, a race, an MCP task, an MCP task's
    question answered twice), and one run per model fault."""
    rng = random.Random(SEED)
    ask = _ask_first(f"{PREFIX}-ask-link", 0)
    ask.decider, ask.duplicate_decision = "link", True
    mix = dataclasses.replace(SIZES["ci"], early=1, expiry=1, can=1, can_expiry=0, races=1)
    issue11 = {p.kind: p for p in exactly_once.plans(PREFIX, mix, rng, phase="A")}
    [question] = question_plans(f"{PREFIX}-question", 1, rng, phase="A")
    found = {
        "export": _export(f"{PREFIX}-export", 0),
        "ask-link": ask,
        "ask-timeout-fail": _ask_timeout(f"{PREFIX}-ask-timeout-fail", 1),
        "cancelled-exports": cancel_plan(f"{PREFIX}-cancel", queue="slow"),
        "early-export": issue11["early-export"],
        "expiry-callback-await": issue11["expiry-callback-await"],
        "expiry-poll-await": issue11["expiry-poll-await"],
        "can-export": issue11["can-export"],
        "race": next(p for p in issue11.values() if p.decider == "race"),
        "mcp-task": _mcp_task(f"{PREFIX}-mcp-task", 1),
        "mcp-question-repeat": question,
    }
    for plan in found.values():
        plan.phase = plan.phase or "A"
        _short_timeouts(plan)
    for fault in MODEL_FAULTS:
        found[f"model-{fault}"] = model = model_plan(f"{PREFIX}-model-{fault}", fault)
        model.phase = "M"
    return found


def load(name: str) -> RunOutcome:
    """A fresh copy of the recorded outcome `name` (a test may change it as it likes)."""
    data = _read(name)
    plan = dict(data["plan"])
    plan["input"] = RunInput.model_validate(plan["input"])
    chain = [
        list(WorkflowHistory.from_json(plan["id"], history).events) for history in data["chain"]
    ]
    state = data["state"]
    return RunOutcome(
        RunPlan(**plan),
        status=data["status"],
        state=None if state is None else RunState.model_validate(state),
        events=[event for events in chain for event in events],
        chain=chain,
        seconds=data["seconds"],
        answers=[Answer(**answer) for answer in data["answers"]],
        notes=list(data["notes"]),
        problems=list(data["problems"]),
        streamed=StreamRead(**data["streamed"]) if data.get("streamed") else None,
        first_run=data["first_run"],
    )


def requests(name: str) -> list[RecordedRequest]:
    """The requests the model server received for the recorded model-fault run `name`."""
    return [RecordedRequest(**request) for request in _read(name)["requests"]]


def stats() -> dict[str, Any]:
    """A fresh copy of the systems' records, as the driver hands them to `check_run`."""
    return copy.deepcopy(_read(STATS))


def recorded() -> list[str]:
    """The names of every recorded outcome."""
    return sorted(p.stem for p in OUTCOMES.glob("*.json") if p.stem != STATS)


@cache
def _read(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((OUTCOMES / f"{name}.json").read_text())
    return data


def _dumped(outcome: RunOutcome, requests: list[RecordedRequest]) -> dict[str, Any]:
    plan = outcome.plan
    assert plan.act is None and plan.schema is None, f"{plan.id}: not recordable"
    fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    fields.update(input=plan.input.model_dump(mode="json"), act=None)
    return {
        "plan": fields,
        "status": outcome.status,
        "state": None if outcome.state is None else outcome.state.model_dump(mode="json"),
        "chain": [
            json.loads(WorkflowHistory(plan.id, events).to_json()) for events in outcome.chain
        ],
        "seconds": round(outcome.seconds, 1),
        "answers": [dataclasses.asdict(answer) for answer in outcome.answers],
        "notes": outcome.notes,
        "problems": outcome.problems,
        "streamed": None if outcome.streamed is None else dataclasses.asdict(outcome.streamed),
        "first_run": outcome.first_run,
        "requests": [dataclasses.asdict(r) for r in requests if _model(r) == plan.id],
    }


def _model(request: RecordedRequest) -> Any:
    return request.body.get("model") if isinstance(request.body, dict) else None


async def _record(names: list[str]) -> int:
    chosen = {name: plan for name, plan in plans().items() if not names or name in names}
    assert set(names) <= set(chosen), f"no such runs: {set(names) - set(chosen)}"
    async with Stack(mcp=True) as stack, httpx.AsyncClient(timeout=30) as http:
        assert stack.client is not None and stack.wire is not None
        await fault_the_systems(http, stack)  # as the suite sets them
        outbox = Outbox(stack.systems_url, http)
        watcher = asyncio.create_task(outbox.watch())
        ctx = stack_context(stack, http, random.Random(SEED), outbox, every_queue=True)
        try:
            outcomes = await asyncio.gather(*(drive(ctx, plan) for plan in chosen.values()))
        finally:
            watcher.cancel()
            assert ctx.streams is not None
            await ctx.streams.close()
        wire = list(stack.wire.requests)
        found = await _stats(http, [stack.systems_url, stack.early_url, stack.slow_url])
        found["mcp"] = (await http.get(f"{stack.mcp_url.removesuffix('/mcp')}/_test/stats")).json()
        found["mcp_tasks"] = await _task_states(stack.mcp_url, outcomes)
        found["refunds"] = (await http.get(f"{stack.systems_url}/refunds")).json()
    if names:  # the other runs' records, kept
        found = _merged(stats(), found)
    broken: dict[str, list[str]] = {}
    for name, outcome in zip(chosen, outcomes, strict=True):
        problems = [p for ps in check_run(outcome, found).values() for p in ps]
        if outcome.plan.fault is not None:
            problems += check_model_fault(outcome, wire)
        if problems:
            broken[name] = problems
    read = [(o.streamed, streams_expected(o.first_run, o.chain)) for o in outcomes if o.streamed]
    rows = [*exactly_once.rows(outcomes, found, None), streams_check(read)]
    broken |= {row.name: row.violations for row in rows if row.violations}
    if broken:
        print(f"not recorded: checks broken: {json.dumps(broken, indent=1)}", file=sys.stderr)
        return 1
    OUTCOMES.mkdir(exist_ok=True)
    for name, outcome in zip(chosen, outcomes, strict=True):
        dumped = _dumped(outcome, wire)
        (OUTCOMES / f"{name}.json").write_text(json.dumps(dumped, indent=1) + "\n")
        print(f"recorded {name}: {outcome.status}, {len(outcome.events)} events")
    (OUTCOMES / f"{STATS}.json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    return 0


def _merged(kept: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The records of runs recorded before and of those recorded now: each part's records are
    by run id (keys, MCP tasks) or unique (job ids, task ids, refunds)."""
    merged = {
        part: {**kept.get(part, {}), **new.get(part, {})} for part in new if part != "refunds"
    }
    merged["refunds"] = [*kept.get("refunds", []), *new.get("refunds", [])]
    return merged


if __name__ == "__main__":
    sys.exit(asyncio.run(_record(sys.argv[1:])))
