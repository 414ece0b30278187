"""Claims and refunds (they answer at once; the claims are seeded, see `CLAIMS`)::

GET  /claims/{claim_id}         {claim_id, valid, amount, customer, reason?} (reason when
                                invalid); 404 for an unknown claim
POST /refunds                   Idempotency-Key header; {claim_id, amount} -> 201 {refund_id,
                                claim_id, amount} (200 and the same refund for a key seen
                                before); 422 for an unknown or invalid claim, or more than
                                is left to refund on the claim
GET  /refunds                   every refund issued, oldest first
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping

from fastapi import APIRouter, HTTPException, Response
from pydantic import BaseModel, Field

from examples.systems.common import IdempotencyKey
from examples.systems.faults import Faults

logger = logging.getLogger(__name__)


class Claim(BaseModel):
    """An insurance claim: whether it is valid, and what it is for."""

    claim_id: str
    valid: bool
    amount: float
    customer: str
    reason: str | None = Field(default=None, description="Why the claim is invalid.")


class RefundRequest(BaseModel):
    """`POST /refunds`."""

    claim_id: str = Field(min_length=1, max_length=100)
    amount: float = Field(gt=0, allow_inf_nan=False)


class Refund(BaseModel):
    """A refund that was issued."""

    refund_id: str
    claim_id: str
    amount: float


class RefundKeyStats(BaseModel):
    """What happened under one refund idempotency key."""

    requests: int
    refund_id: str


# Seeded and never changed: what `GET /claims/{claim_id}` answers and refunds are checked against.
CLAIMS: Mapping[str, Claim] = {
    claim.claim_id: claim
    for claim in (
        Claim(claim_id="C-118", valid=True, amount=420.0, customer="Dana Whitfield"),
        Claim(claim_id="C-200", valid=True, amount=80.0, customer="Omar Haddad"),
        Claim(claim_id="C-305", valid=True, amount=1250.0, customer="Mei Tanaka"),
        Claim(
            claim_id="C-999",
            valid=False,
            amount=300.0,
            customer="Lena Vogt",
            reason="policy lapsed",
        ),
    )
}


class Refunds:
    """The claims desk: the seeded claims, and the refunds issued against them.

    Args:
        faults: The systems' faults (`accept_then_fail_next_refunds`).
    """

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.refunds: list[Refund] = []
        self.keys: dict[str, RefundKeyStats] = {}
        self._ids = itertools.count(1)

    def claim(self, claim_id: str) -> Claim:
        """The claim, or a 404."""
        claim = CLAIMS.get(claim_id)
        if claim is None:
            raise HTTPException(404, f"no claim {claim_id}")
        return claim

    def refund(self, key: str | None, request: RefundRequest) -> tuple[Refund, bool]:
        """Issue a refund, or find the one already issued under `key`.

        Returns:
            The refund, and whether this request issued it.

        Raises:
            HTTPException: 400 without a key; 422 for a key used for another request, an
                unknown or invalid claim, or more than is left to refund; 503 for an injected
                fault.
        """
        if not key:
            raise HTTPException(400, "the Idempotency-Key header is required")
        stats = self.keys.get(key)
        if stats is not None:
            stats.requests += 1
            refund = self._refund_by_id(stats.refund_id)
            if (refund.claim_id, refund.amount) != (request.claim_id, request.amount):
                raise HTTPException(
                    422,
                    f"Idempotency-Key {key!r} was already used for a different refund; "
                    "use a new key for a new refund",
                )
            created = False
        else:
            # Nothing awaits between the checks and the record, so concurrent requests can
            # neither both use one key nor together refund more than the claim.
            self._check_refundable(request)
            refund = Refund(
                refund_id=f"rfd_{next(self._ids)}",
                claim_id=request.claim_id,
                amount=request.amount,
            )
            self.refunds.append(refund)
            self.keys[key] = RefundKeyStats(requests=1, refund_id=refund.refund_id)
            logger.info("refund %s issued: %s", refund.refund_id, request)
            created = True
        if self.faults.accept_then_fail_next_refunds:
            self.faults.accept_then_fail_next_refunds -= 1
            raise HTTPException(503, "the refund service is temporarily unavailable; try again")
        return refund, created

    def reset(self) -> None:
        """Forget every refund and key, and number refunds from 1 again (the claims stay)."""
        self.refunds.clear()
        self.keys.clear()
        self._ids = itertools.count(1)

    def _check_refundable(self, request: RefundRequest) -> None:
        claim = CLAIMS.get(request.claim_id)
        if claim is None:
            raise HTTPException(422, f"no claim {request.claim_id}; nothing to refund")
        if not claim.valid:
            raise HTTPException(
                422, f"claim {claim.claim_id} is not valid ({claim.reason}); no refund allowed"
            )
        refunded = sum(r.amount for r in self.refunds if r.claim_id == claim.claim_id)
        left = round(claim.amount - refunded, 2)
        # Compared in cents, so float noise (0.1 + 0.2) never refuses an exact refund.
        if round(request.amount, 2) > left:
            already = f" ({refunded:.2f} already refunded)" if refunded else ""
            raise HTTPException(
                422,
                f"refund of {request.amount:.2f} exceeds what is left on claim "
                f"{claim.claim_id}: {left:.2f} of {claim.amount:.2f}{already}",
            )

    def _refund_by_id(self, refund_id: str) -> Refund:
        return next(r for r in self.refunds if r.refund_id == refund_id)


def router(refunds: Refunds) -> APIRouter:
    """The claims desk's routes."""
    routes = APIRouter()

    @routes.get("/claims/{claim_id}", response_model_exclude_none=True)
    async def get_claim(claim_id: str) -> Claim:
        return refunds.claim(claim_id)

    @routes.post("/refunds", status_code=201)
    async def issue_refund(
        request: RefundRequest, response: Response, idempotency_key: IdempotencyKey = None
    ) -> Refund:
        refund, created = refunds.refund(idempotency_key, request)
        if not created:
            response.status_code = 200
        return refund

    @routes.get("/refunds")
    async def list_refunds() -> list[Refund]:
        return list(refunds.refunds)

    return routes
