"""The tree's activity: a node under its root's budget reserves its next model call there, by
an Update to the root run through the client (workflows cannot send Updates; an activity can,
and is retried)."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from waitstate.client import (
    RunEnded,
    RunNotFound,
    TemporalFailed,
    UpdateRefused,
    WaitstateClient,
)
from waitstate.schemas.tree import RESERVE_TREE_BUDGET, BudgetAnswer, TreeReserve

from .pulse import pulse


class TreeActivities:
    """What the nodes of trees ask their roots, through the client."""

    def __init__(self, client: WaitstateClient) -> None:
        self._client = client

    @activity.defn(name=RESERVE_TREE_BUDGET)
    async def reserve_tree_budget(self, input: TreeReserve) -> BudgetAnswer:
        """The root's answer to the node's reservation (counted once, by its Update id); any
        other failure is retried (the same Update).

        Raises:
            ApplicationError: non-retryable, when the root refused it or cannot answer any more
                (it ended, or never was).
        """
        try:
            async with pulse():  # a killed worker's attempt is tried again within seconds
                return await self._client.reserve(input.root, input.ask, update_id=input.update_id)
        except (UpdateRefused, RunEnded, RunNotFound, TemporalFailed) as err:
            raise ApplicationError(
                f"the root {input.root} cannot grant it: {err}", non_retryable=True
            ) from None
