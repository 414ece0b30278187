"""Agent trees as a person reads them: every node under a run (its sub-agents, theirs, ...), who
runs, who waits for what, and what each spent, for `status` and the gateway.

A tree's nodes are found by id, `<parent id>/<agent>-<n>` (`workflows/tree.py` names them so),
and read as any run is: what Temporal's list view holds of them, and each node's own state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio.client import WorkflowExecution
from temporalio.service import RPCError

from waitstate.client._base import run_status
from waitstate.client._errors import ClientError
from waitstate.client._updates import UpdateCalls
from waitstate.names import AGENT_NAME, AGENT_STATUS, TREE_BUDGET_UPDATE, WAITING_FOR
from waitstate.schemas import Usage
from waitstate.schemas.tree import BudgetAnswer, BudgetAsk

# How many nodes' states `tree` asks at once, and how many nodes it reads at most.
TREE_QUERIES_AT_ONCE = 8
TREE_LIMIT = 2_000
# How long a node's reservation waits for its root's answer (a raise asks a person: longer).
RESERVE_TIMEOUT = timedelta(seconds=90)


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


class TreeCalls(UpdateCalls):
    """What `WaitstateClient` reads of a run's tree, and a node's reservations from its root's
    budget."""

    async def reserve(
        self,
        root: str,
        ask: BudgetAsk,
        *,
        update_id: str,
        answer_within: timedelta = RESERVE_TIMEOUT,
    ) -> BudgetAnswer:
        """Send a node's reservation (and what it spent) to its tree's root, as the root's
        `tree_budget` Update under `update_id`: sent again under the same id, it is counted
        once, and gets the first answer.

        Raises:
            UpdateRefused, RunEnded, RunNotFound: the root cannot grant it.
            RunUnavailable, OutcomeUnknown, Unreachable: not answered for now; send it again.
            TemporalFailed: Temporal refused the call.
        """
        return await self._send_update(
            root,
            TREE_BUDGET_UPDATE,
            ask,
            BudgetAnswer,
            update_id=update_id,
            what="budget reservation",
            answer_within=answer_within,
        )

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
