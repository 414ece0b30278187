"""Sync tools over the demo claims desk: check a claim, issue a refund (gated by approval)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, Field

from examples.demo.services import SystemsClient, check_answer
from waitstate import ApprovalPolicy, ToolError, ToolSpec

# Refunds above this amount wait for a person's sign-off.
REFUND_APPROVAL_THRESHOLD = 100.0
REFUND_APPROVAL_TIMEOUT = timedelta(hours=24)
CLAIMS_SERVICE = "claims service"
REFUND_SERVICE = "refund service"


class CheckClaimArgs(BaseModel):
    claim_id: str = Field(
        description="The claim's id as the customer or ticket gives it, e.g. 'C-118'.",
        min_length=1,
        max_length=100,
    )


class IssueRefundArgs(BaseModel):
    claim_id: str = Field(
        description="The claim to refund, e.g. 'C-118'. Check with check_claim first that it "
        "exists and is valid.",
        min_length=1,
        max_length=100,
    )
    amount: float = Field(
        description="The amount to refund, greater than 0 and at most the claim's amount, "
        "e.g. 420.0.",
        gt=0,
        allow_inf_nan=False,
    )


def refund_idempotency_key(args: IssueRefundArgs) -> str:
    """The `Idempotency-Key` of a refund: `refund/{claim_id}/{amount}`.

    A handler gets only the validated arguments (no run or call id), so the key is derived
    from them. It has to be stable: when the refund was issued but the answer was lost (a
    timeout, a 503, a worker crash), Temporal retries the activity, and the retry must find
    that refund rather than issue a second one. The price is that one claim cannot get two
    separate refunds of exactly the same amount; for a claim desk that is the safe side.
    """
    # repr of a float is its shortest exact form, the same in every process.
    return f"refund/{args.claim_id}/{args.amount!r}"


def refund_approval_policy() -> ApprovalPolicy:
    """The default for refunds: the claims team has a day, then their managers are told."""
    return ApprovalPolicy(
        timeout=REFUND_APPROVAL_TIMEOUT,
        on_timeout="escalate",
        approvers="claims-team",
        escalate_to="claims-managers",
    )


class RefundDesk(SystemsClient):
    """Claims and refunds on the demo systems, as tool handlers."""

    async def check_claim(self, args: CheckClaimArgs) -> dict[str, Any]:
        """The claim: whether it is valid (and if not, why), its amount and customer.

        Raises:
            ToolError: no such claim, or another refusal the model should read.
            ServiceError, httpx.TransportError: the service is unavailable; retry.
        """
        response = await self._http.get(f"{self._base_url}/claims/{quote(args.claim_id, safe='')}")
        if response.status_code == 404:
            raise ToolError(f"no claim {args.claim_id}")
        claim: dict[str, Any] = check_answer(response, CLAIMS_SERVICE)
        return claim

    async def issue_refund(self, args: IssueRefundArgs) -> dict[str, Any]:
        """Issue a refund, once per claim and amount (see `refund_idempotency_key`).

        Raises:
            ToolError: the service refused (unknown or invalid claim, more than the claim).
            ServiceError, httpx.TransportError: the service is unavailable; retry.
        """
        response = await self._http.post(
            f"{self._base_url}/refunds",
            json={"claim_id": args.claim_id, "amount": args.amount},
            headers={"Idempotency-Key": refund_idempotency_key(args)},
        )
        refund = check_answer(response, REFUND_SERVICE)
        return {
            "refund_id": refund["refund_id"],
            "claim_id": refund["claim_id"],
            "amount": refund["amount"],
        }

    def specs(
        self,
        *,
        approval_threshold: float = REFUND_APPROVAL_THRESHOLD,
        policy: ApprovalPolicy | None = None,
    ) -> list[ToolSpec]:
        """`check_claim` and `issue_refund`; refunds over `approval_threshold` need approval."""

        def over_threshold(args: IssueRefundArgs) -> bool:
            # Evaluated by the workflow, so it must stay a pure function of the arguments.
            return args.amount > approval_threshold

        return [
            ToolSpec(
                name="check_claim",
                description=(
                    "Look up an insurance claim. Returns {claim_id, valid, amount, customer}, "
                    "plus reason when the claim is not valid. Only valid claims can be refunded."
                ),
                args=CheckClaimArgs,
                handler=self.check_claim,
            ),
            ToolSpec(
                name="issue_refund",
                description=(
                    "Refund a valid claim, at most its amount. Returns {refund_id, claim_id, "
                    f"amount}}. Refunds over {approval_threshold:.2f} are issued only after a "
                    "person approves them. Calling it again with the same claim and amount "
                    "returns the same refund; it never pays twice."
                ),
                args=IssueRefundArgs,
                handler=self.issue_refund,
                requires_approval=over_threshold,
                approval=policy if policy is not None else refund_approval_policy(),
            ),
        ]


def refund_tools(
    http: httpx.AsyncClient,
    base_url: str,
    *,
    approval_threshold: float = REFUND_APPROVAL_THRESHOLD,
    policy: ApprovalPolicy | None = None,
) -> list[ToolSpec]:
    """`check_claim` and `issue_refund`, over the demo systems at `base_url`.

    Args:
        http: The client the tools call the systems with; the caller owns and closes it.
        base_url: The systems' root.
        approval_threshold: Refunds of more than this need a person's approval.
        policy: How long approvals wait and what happens then; by default the claims team
            has 24 hours, then it escalates to the claims managers.
    """
    return RefundDesk(http, base_url).specs(approval_threshold=approval_threshold, policy=policy)
