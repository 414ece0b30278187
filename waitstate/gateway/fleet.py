"""What the fleet's runs are doing, for the dashboard: runs by status, and open runs by
what they wait for (`WaitingFor`), counted by Temporal's visibility store and exported as
gauges on the gateway's /metrics.

No worker can export these: a waiting run runs no code, and each worker sees only the runs in
its cache. The gateway holds a client of the whole namespace, so it counts them, every
`WAITSTATE_RUN_COUNTS_SECONDS` (30 s by default; 0 turns it off). Every gateway of a fleet
exports the same counts: a dashboard takes their `max`, not their sum.
"""

from __future__ import annotations

import asyncio
import logging
from typing import get_args

from prometheus_client import CollectorRegistry, Gauge
from temporalio.client import Client

from waitstate.client import GOING_STATUSES
from waitstate.names import AGENT_RUN, AGENT_STATUS, WAIT_KINDS, WAITING_FOR
from waitstate.schemas.run import RunStatus

log = logging.getLogger("waitstate.gateway")
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
_RUNS = f"WorkflowType = '{AGENT_RUN}'"
# Temporal's statuses of a run it ended (terminated, timed out) while its AgentStatus still
# said it was going: counted as `failed`, as `waitstate.client.run_status` reads them.
_ENDED_BY_TEMPORAL = ("Failed", "Terminated", "TimedOut")


def status_query(status: str) -> str:
    """The visibility query of the runs `waitstate.client.run_status` says are in `status`: a
    run still going by its AgentStatus, while it runs; a failed one by its AgentStatus, or by
    Temporal's status when Temporal ended it; a completed one by its AgentStatus, or (from
    revision 1, which upserts none as it completes) by Temporal's; the other endings by their
    AgentStatus."""
    going = ", ".join(f"'{s}'" for s in GOING_STATUSES)
    if status in GOING_STATUSES:
        return f"ExecutionStatus = 'Running' AND {AGENT_STATUS.name} = '{status}'"
    if status == "failed":
        ended = ", ".join(f"'{e}'" for e in _ENDED_BY_TEMPORAL)
        return (
            f"({AGENT_STATUS.name} = 'failed' OR "
            f"(ExecutionStatus IN ({ended}) AND {AGENT_STATUS.name} IN ({going})))"
        )
    if status == "completed":  # since revision 1 a run that completes upserts no status
        return (
            f"({AGENT_STATUS.name} = 'completed' OR "
            f"(ExecutionStatus = 'Completed' AND {AGENT_STATUS.name} IN ({going})))"
        )
    return f"{AGENT_STATUS.name} = '{status}'"


class RunCounts:
    """Gauges of runs by status and by what open ones wait for, refreshed by `run()`."""

    def __init__(self, client: Client, registry: CollectorRegistry) -> None:
        self._client = client
        self.by_status = Gauge(
            "waitstate_runs",
            "Runs by AgentStatus (failed: also runs Temporal ended while they ran)",
            ["status"],
            registry=registry,
        )
        self.waiting = Gauge(
            "waitstate_runs_waiting",
            "Open runs by what they wait for (WaitingFor)",
            ["waiting_for"],
            registry=registry,
        )
        # Every label from the start, so the series exist (at 0) before the first count.
        for status in RUN_STATUSES:
            self.by_status.labels(status=status)
        for kind in WAIT_KINDS:
            self.waiting.labels(waiting_for=kind)

    async def refresh(self) -> None:
        """Count once (one visibility query per status and per kind of wait)."""
        for status in RUN_STATUSES:
            counted = await self._client.count_workflows(f"{_RUNS} AND {status_query(status)}")
            self.by_status.labels(status=status).set(counted.count)
        for kind in WAIT_KINDS:
            counted = await self._client.count_workflows(
                f"{_RUNS} AND ExecutionStatus = 'Running' AND {WAITING_FOR.name} = '{kind}'"
            )
            self.waiting.labels(waiting_for=kind).set(counted.count)

    async def run(self, every: float) -> None:
        """Refresh every `every` seconds until cancelled; a failed count is logged and kept
        (the gauges keep their last values)."""
        while True:
            try:
                await self.refresh()
            except Exception as err:  # noqa: BLE001 - the server may be restarting
                log.warning("counting runs failed: %s", err)
            await asyncio.sleep(every)
