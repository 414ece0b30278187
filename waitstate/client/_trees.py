"""Agent trees as a person reads them: every node under a run (its sub-agents, theirs, ...), who
runs, who waits for what, and what each spent, for `status` and the gateway.

A tree's nodes are found by id, `<parent id>/<agent>-<n>` (`workflows/tree.py` names them so),
and read as any run is: what Temporal's list view holds of them, and each node's own state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio.client import WorkflowExecution
from temporalio.service import RPCError

from waitstate.client._base import run_status
from waitstate.client._errors import ClientError
from waitstate.client._runs import RunCalls
from waitstate.names import AGENT_NAME, AGENT_STATUS, WAITING_FOR
from waitstate.schemas import Usage

# How many nodes' states `tree` asks at once, and how many nodes it reads at most.
TREE_QUERIES_AT_ONCE = 8
TREE_LIMIT = 2_000


@dataclass(frozen=True)
class TreeNode:
    """One node of a tree: a run, where it is, how it stands and what it spent itself (None:
    no worker answered for it)."""

    run_id: str
    path: str  # below the tree's top, `team-1/researcher-2`; "" for the top
    agent: str | None
    status: str
    waiting_for: str | None
    usage: Usage | None
    open_requests: int = 0

    @property
    def depth(self) -> int:
        return 0 if not self.path else self.path.count("/") + 1


class TreeCalls(RunCalls):
    """What `WaitstateClient` reads of a run's tree."""

    async def tree(self, run_id: str) -> list[TreeNode]:
        """The run and every node below it, the run first, then by path.

        Raises:
            RunNotFound: no such run.
            TemporalFailed: Temporal could not list its nodes.
        """
        if '"' in run_id or "\\" in run_id:
            return [await self._node(run_id, "", None, None, None)]
        description = await self.describe(run_id)
        top = await self._node(
            run_id,
            "",
            description.typed_search_attributes.get(AGENT_NAME),
            run_status(description.typed_search_attributes.get(AGENT_STATUS), description.status),
            description.typed_search_attributes.get(WAITING_FOR),
        )
        query = f'WorkflowId STARTS_WITH "{run_id}/" AND ExecutionStatus != "ContinuedAsNew"'
        try:
            found: list[WorkflowExecution] = []
            async for execution in self._client.list_workflows(query, limit=TREE_LIMIT):
                found.append(execution)
        except RPCError as err:
            self._raise(err, None, f"could not list the nodes of {run_id}")
        gate = asyncio.Semaphore(TREE_QUERIES_AT_ONCE)

        async def node(execution: WorkflowExecution) -> TreeNode:
            attributes = execution.typed_search_attributes
            async with gate:
                return await self._node(
                    execution.id,
                    execution.id.removeprefix(f"{run_id}/"),
                    attributes.get(AGENT_NAME),
                    run_status(attributes.get(AGENT_STATUS), execution.status),
                    attributes.get(WAITING_FOR),
                )

        below = await asyncio.gather(*(node(execution) for execution in found))
        return [top, *sorted(below, key=lambda n: n.path)]

    async def _node(
        self,
        run_id: str,
        path: str,
        agent: str | None,
        status: str | None,
        waiting_for: str | None,
    ) -> TreeNode:
        try:
            state = await self.query(run_id)
        except ClientError:
            return TreeNode(run_id, path, agent, status or "unknown", waiting_for, None)
        if status in (None, "running", "waiting"):
            status = state.status
        requests = sum(1 for r in state.approvals.values() if r.open)
        requests += sum(1 for q in state.questions.values() if q.open)
        return TreeNode(
            run_id, path, state.agent or agent, status, waiting_for, state.usage, requests
        )
