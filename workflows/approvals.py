"""The approval desk: requests for a person's decision, their timers and `on_timeout` policies,
and the decisions that arrive for them (signal, Update, or a link through the gateway)."""

from __future__ import annotations

import json

from temporalio import workflow

from waitstate.schemas import RunStatus, ToolCall, ToolResult
from waitstate.schemas.approvals import (
    ApprovalNotice,
    ApprovalNoticeSent,
    ApprovalPolicy,
    ApprovalRequest,
    DecideInput,
    DecideOutcome,
    Decision,
    DecisionKind,
    DecisionSignal,
)
from waitstate.schemas.builtin import RequestApprovalArgs
from waitstate.schemas.errors import (
    APPROVAL_DECIDED,
    APPROVAL_NONCE_MISMATCH,
    APPROVAL_UNKNOWN,
)
from waitstate.schemas.run import NOTIFY_APPROVAL

from . import ledger
from .asides import ApprovalAsides
from .continuation import KEEP_CLOSED
from .desk import Desk, Notifying, Refusals, new_nonce, window
from .metrics import approval_decided
from .parts import RunParts


class ApprovalExpired(Exception):
    """An approval expired under on_timeout `fail`: the run ends, cleanly, with the reason."""

    status: RunStatus = "approval_expired"


class ApprovalDesk(Desk[ApprovalRequest]):
    """Every approval request of one run, from the question to the decision: the desk of
    questions whose answer is fixed (approve or reject), whose timeout policy is `on_timeout`
    (escalate, a default decision, expire or fail)."""

    called = "approval request"
    refusals = Refusals(APPROVAL_UNKNOWN, APPROVAL_NONCE_MISMATCH, APPROVAL_DECIDED)
    notifying = Notifying(NOTIFY_APPROVAL, ApprovalNotice, ApprovalNoticeSent, "approval for")
    shows_escalation_once_told = True

    def __init__(self, run: RunParts, asides: ApprovalAsides) -> None:
        super().__init__(run)
        self._asides = asides
        # The nonces of open requests' links; only their hashes go into the state.
        self._link_nonces: dict[str, str] = {}

    def trim(self) -> None:
        """Bound what continue-as-new carries of the requests: every open one, and the latest
        `KEEP_CLOSED` decided ones."""
        requests = self._state.approvals
        for key in [k for k, r in requests.items() if not r.open][:-KEEP_CLOSED]:
            del requests[key]

    # --- asking --------------------------------------------------------------------------

    async def request_approval(self, call: ToolCall) -> ToolResult:
        """The built-in `request_approval` tool: the model asks a person, under the run's
        approval policy, and is told the outcome."""
        args = ledger.arguments(call, RequestApprovalArgs)
        if isinstance(args, ToolResult):
            return args
        request = await self.ask(call, f"{args.action}: {args.reason}", self._input.approval)
        return ToolResult(
            tool_call_id=call.id,
            name=call.name,
            content=ledger.to_json(ledger.approval_outcome(request)),
            is_error=request.status != "approved",
        )

    async def ask(
        self, call: ToolCall, reason: str, policy: ApprovalPolicy, *, checkpoint: bool = True
    ) -> ApprovalRequest:
        """Ask a person, wait (holding no worker) for the decision or the timeout policy
        (`checkpoint`: the model commits what is done and what remains first)."""
        if checkpoint:
            # Before the request exists, so that a slow checkpoint does not eat into its window
            # (how long a person takes is never known: always worth one).
            await self._memory.checkpoint(f"approval of {call.name} from {policy.approvers}")
        request = self._request(call, reason, policy)
        label = f"approval of {call.name} from {policy.approvers}"
        details = f"waiting for approval: {reason}"
        try:
            with self._waiting(request, "approval", details, label) as notices:
                if not await self._windows(request, notices):
                    self._time_out(request)
        finally:
            self._link_nonces.pop(request.request_id, None)
        return request

    async def _window(self, request: ApprovalRequest, *, mirror: bool = False) -> bool:
        """`window` for the request; a thread's message that comes meanwhile is answered aside
        and the window goes on to its deadline."""
        while True:
            wake = None if mirror else self._asides  # (mirrored: the wait is for its timer)
            closed = await window(request, mirror=mirror, wake=wake)
            if closed or not self._asides.wanted():
                return closed
            await self._asides.answer(request)

    def _request(self, call: ToolCall, reason: str, policy: ApprovalPolicy) -> ApprovalRequest:
        now = workflow.now()
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            arguments = {"raw": call.arguments}
        request = ApprovalRequest(
            request_id=str(workflow.uuid4()),
            tool=call.name,
            tool_call_id=call.id,
            arguments=arguments if isinstance(arguments, dict) else {"value": arguments},
            reason=reason,
            requested_at=now,
            expires_at=now + policy.timeout,
            policy=policy,
            sent_to=[policy.approvers],
        )
        # The run chooses the links' nonce, so a link works the moment it is posted, and
        # keeps working whichever key signs the escalation's links.
        nonce = new_nonce()
        self._link_nonces[request.request_id] = nonce
        request.nonce_hash = ledger.nonce_hash(nonce)
        self._state.approvals[request.request_id] = request
        ledger.step(
            self._state,
            "event",
            call.name,
            f"{self._named(request)} requested from {policy.approvers}",
        )
        return request

    def _mirrors_escalation(self, request: ApprovalRequest) -> bool:
        """Whether a decision was applied in the workflow task in which the window ended: the
        run then escalates in form only.

        In that task the window's timer and the decision may be seen in either order (a
        worker that rebuilds the run may see the timer first, a replay sees the decision
        first). Seen first, the timer escalates: the notice and the second window's timer are
        scheduled, then cancelled unsent as the decision follows, which spends their sequence
        numbers. Escalating in both orders leaves the same history (nothing) and the same
        numbers for what comes next.
        """
        decision = request.decision
        return (
            request.policy.on_timeout == "escalate"
            and not request.escalated
            and decision is not None
            and not decision.by_policy
            and decision.decided_at is not None
            and decision.decided_at >= request.expires_at
        )

    def _time_out(self, request: ApprovalRequest) -> None:
        """Apply the request's `on_timeout` (`default` or expire; `fail` ends the run)."""
        policy = request.policy
        if policy.on_timeout == "default":
            request.decision = Decision(
                decision=policy.default_decision,
                reviewer="policy",
                comment=f"no decision by {request.expires_at.isoformat()}: default applied",
                decided_at=workflow.now(),
                by_policy=True,
            )
            request.status = "approved" if policy.default_decision == "approve" else "rejected"
            approval_decided(request)
            ledger.step(
                self._state,
                "event",
                request.tool,
                f"{self._named(request)} {request.status} by default",
            )
            return
        request.status = "expired"
        approval_decided(request)
        ledger.step(
            self._state,
            "event",
            request.tool,
            f"{self._named(request)} expired",
            is_error=True,
        )
        if policy.on_timeout == "fail":
            raise ApprovalExpired(
                f"{self._named(request)} for {request.tool} expired at "
                f"{request.expires_at.isoformat()} with no decision: {request.reason}"
            )

    # --- telling people ------------------------------------------------------------------

    def _requests(self) -> dict[str, ApprovalRequest]:
        return self._state.approvals

    def _named(self, request: ApprovalRequest) -> str:
        return f"approval {request.request_id}"

    def _link_nonce(self, request: ApprovalRequest) -> str | None:
        return self._link_nonces.get(request.request_id)

    # --- decisions -----------------------------------------------------------------------

    def validate(self, input: DecideInput) -> None:
        """Refuse a decision that cannot apply (nothing is written to the run's history)."""
        self._reply_to(input.request_id, input.nonce)

    def decide(self, input: DecideInput) -> DecideOutcome:
        """Apply a validated decision."""
        request = self._state.approvals[input.request_id]
        self._apply(request, input.decision, input.reviewer, input.comment)
        return DecideOutcome(accepted=True, status=request.status, delivery_id=input.delivery_id)

    def decide_by_signal(self, decision: DecisionKind, signal: DecisionSignal) -> None:
        """Apply a signalled decision; one for an unknown or closed request is recorded."""
        request = self._state.approvals.get(signal.request_id)
        if request is None:
            note = f"{decision} by {signal.reviewer} for unknown request {signal.request_id}"
            self._state.ignored_decisions.append(note)
            workflow.logger.info("ignored decision: %s", note)
            return
        if not request.open:
            request.ignored.append(
                f"{decision} by {signal.reviewer}: request already {request.status}"
            )
            return
        self._apply(request, decision, signal.reviewer, signal.comment)

    def _apply(
        self, request: ApprovalRequest, decision: DecisionKind, reviewer: str, comment: str
    ) -> None:
        request.decision = Decision(
            decision=decision, reviewer=reviewer, comment=comment, decided_at=workflow.now()
        )
        request.status = "approved" if decision == "approve" else "rejected"
        ledger.step(
            self._state,
            "event",
            request.tool,
            f"{self._named(request)} {request.status} by {reviewer}",
        )
        approval_decided(request)
