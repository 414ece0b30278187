"""Outcomes of fault class 19 (chaos.model_kills), recorded once for its check's tests: a plain
run and a thread whose model calls were held at the model while the workers holding them were
SIGKILLed, driven by `ModelKills.run` as the suite drives them, on a chaos stack (no other
fault). Written beside the other recorded outcomes (`recorded.py`), in their form, with what
the class's driver saw (`facts`: the kills, the messages sent, how often the model was asked):

    .venv/bin/python -m tests.chaos_checks.recorded_kills

It refuses to write outcomes that break an invariant or the class's check (they are the
passing side of it).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import random
import sys

import httpx

from chaos.driver import stack_context
from chaos.invariants import check_run
from chaos.model_kills import ModelKills, rows
from chaos.runs import Outbox, RunOutcome
from chaos.sizes import SIZES
from chaos.stack import Stack
from tests.chaos_checks.recorded import OUTCOMES, _dumped, _read, load, stats

SEED = 39
PREFIX = "chaos-r"
NAMES = {"model-kill": "model-kill", "model-kill-thread": "model-kill-thread"}


def load_kill(name: str) -> RunOutcome:
    """A fresh copy of the recorded class 19 outcome `name`, with the driver's facts."""
    outcome = load(name)
    outcome.facts = copy.deepcopy(_read(name)["facts"])
    return outcome


async def _record() -> int:
    size = dataclasses.replace(SIZES["ci"], model_kills=1)
    async with Stack() as stack, httpx.AsyncClient(timeout=30) as http:
        assert stack.client is not None and stack.wire is not None
        outbox = Outbox(stack.systems_url, http)
        watcher = asyncio.create_task(outbox.watch())
        ctx = stack_context(stack, http, random.Random(SEED), outbox, every_queue=False)
        try:
            outcomes = await ModelKills(stack, size, asyncio.Lock()).run(ctx, PREFIX, phase="A")
        finally:
            watcher.cancel()
        wire = list(stack.wire.requests)
    broken = {o.plan.id: [p for ps in check_run(o, stats()).values() for p in ps] for o in outcomes}
    broken = {run: problems for run, problems in broken.items() if problems}
    broken |= {row.name: row.violations for row in rows(outcomes) if row.violations}
    if broken:
        print(f"not recorded: checks broken: {json.dumps(broken, indent=1)}", file=sys.stderr)
        return 1
    for outcome in outcomes:
        name = NAMES[outcome.plan.kind]
        kept = dataclasses.replace(outcome, plan=dataclasses.replace(outcome.plan, act=None))
        dumped = _dumped(kept, wire) | {"facts": outcome.facts}
        (OUTCOMES / f"{name}.json").write_text(json.dumps(dumped, indent=1) + "\n")
        print(f"recorded {name}: {outcome.status}, {len(outcome.events)} events")
    for row in rows(outcomes):
        print(f"{row.name} | {row.outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_record()))
