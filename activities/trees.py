"""The tree's activity: a node under its root's budget reserves its next model call there, by
an Update to the root run (workflows cannot send Updates; an activity can, and is retried)."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from waitstate.names import TREE_BUDGET_UPDATE
from waitstate.schemas.tree import RESERVE_TREE_BUDGET, BudgetAnswer, TreeReserve

# The root cannot answer any more: it ended, or it never was.
GONE = (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)


class TreeActivities:
    """What the nodes of trees ask their roots, with the client they ask through."""

    def __init__(self, client: Client) -> None:
        self._client = client

    @activity.defn(name=RESERVE_TREE_BUDGET)
    async def reserve_tree_budget(self, input: TreeReserve) -> BudgetAnswer:
        """The root's answer to the node's reservation (applied once, by its Update id).

        Raises:
            ApplicationError: non-retryable, when the root refused the Update or has ended.
        """
        handle = self._client.get_workflow_handle(input.root)
        try:
            answer: BudgetAnswer = await handle.execute_update(
                TREE_BUDGET_UPDATE, input.ask, id=input.update_id, result_type=BudgetAnswer
            )
            return answer
        except WorkflowUpdateFailedError as err:
            raise ApplicationError(
                f"the root refused: {err.cause or err}", non_retryable=True
            ) from None
        except RPCError as err:
            if err.status in GONE:
                raise ApplicationError(
                    f"the root {input.root} cannot answer: {err.message}", non_retryable=True
                ) from None
            raise
