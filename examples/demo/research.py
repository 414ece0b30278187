"""The research team: a lead that plans, starts its researchers at once (each a run of its own)
and writes a report of what each found. One researcher looks a claim up (a sync tool), one
exports the quarter's transactions (a long tool: its run waits for the export's webhook), one
reads the payments made on the claim (a person approves each read first).

Their agents name no model: each runs on the worker's default, the scripted model offline, a
real one when a provider's key is set (as the demo agent does).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, Field

from examples.demo.services import SystemsClient, check_answer
from waitstate import Agent, ApprovalPolicy, ToolError, ToolSpec

# What `make tree-demo` asks the lead.
RESEARCH_TASK = (
    "Research claim C-118 for the Q3 audit: the claim itself, the Q3 transactions export "
    "behind it, and what was already paid on it."
)
# The payment ledger is finance's: a person on the finance team approves each read.
PAYMENTS_APPROVAL = ApprovalPolicy(
    timeout=timedelta(hours=24), approvers="finance-team", escalate_to="finance-managers"
)


class PaymentHistoryArgs(BaseModel):
    claim_id: str = Field(
        description="The claim whose payments to read, e.g. 'C-118'.", min_length=1, max_length=100
    )


class PaymentLedger(SystemsClient):
    """The refunds paid on each claim, from the demo claims desk, as a tool handler."""

    async def read_payment_history(self, args: PaymentHistoryArgs) -> dict[str, Any]:
        """The refunds paid on the claim, and their total.

        Raises:
            ToolError: no such claim.
            ServiceError, httpx.TransportError: the service is unavailable; retry.
        """
        claim = await self._http.get(f"{self._base_url}/claims/{quote(args.claim_id, safe='')}")
        if claim.status_code == 404:
            raise ToolError(f"no claim {args.claim_id}")
        check_answer(claim, "claims service")
        refunds = check_answer(await self._http.get(f"{self._base_url}/refunds"), "refund service")
        paid = [r for r in refunds if r["claim_id"] == args.claim_id]
        return {
            "claim_id": args.claim_id,
            "refunds": paid,
            "refunded": round(sum(r["amount"] for r in paid), 2),
        }

    def spec(self) -> ToolSpec:
        """`read_payment_history`, gated by a person's approval."""
        return ToolSpec(
            name="read_payment_history",
            description=(
                "Read the refunds already paid on a claim, from finance's payment ledger. "
                "Returns {claim_id, refunds, refunded}: each refund and their total. A person "
                "on the finance team approves each read first."
            ),
            args=PaymentHistoryArgs,
            handler=self.read_payment_history,
            requires_approval=True,
            approval=PAYMENTS_APPROVAL,
        )


def payment_history_tool(http: httpx.AsyncClient, base_url: str) -> ToolSpec:
    """`read_payment_history`, over the demo systems at `base_url`."""
    return PaymentLedger(http, base_url).spec()


RESEARCH_AGENTS = [
    Agent(
        "research-lead",
        instructions=(
            "You lead a team of researchers. Plan the research, then start the researchers "
            "whose tools the task needs, all in one turn so that they work at once; give each "
            "a task complete in itself (they see nothing else of yours). When all have "
            "answered, write a short report: one line per researcher, saying what it found, "
            "or plainly that it could not find it."
        ),
        sub_agents=["researcher", "data-researcher", "payments-researcher"],
        max_children=5,
        max_depth=1,
    ),
    Agent(
        "researcher",
        instructions="You look up insurance claims with check_claim and say what you found.",
        description="Looks up an insurance claim: whether it is valid, its amount, its customer.",
        tools=["check_claim"],
    ),
    Agent(
        "data-researcher",
        instructions=(
            "You export datasets with start_export, check the file's row count with "
            "verify_row_count, and say where the file is and how many rows it holds."
        ),
        description=(
            "Exports a dataset for a period (it takes minutes; the export service reports "
            "back by webhook) and checks the file's row count."
        ),
        tools=["start_export", "verify_row_count"],
    ),
    Agent(
        "payments-researcher",
        instructions=(
            "You read what was refunded on claims with read_payment_history and say what you found."
        ),
        description=(
            "Reads the refunds already paid on a claim, from finance's ledger (a person "
            "approves each read)."
        ),
        tools=["read_payment_history"],
    ),
]
