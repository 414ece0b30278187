"""What the client's Updates and the gateway's deliveries of them share: the Update ids that make
identical decisions and answers one Update, and what an Update's RPC failure means (a run that
has ended, no such run, a run that did not take it for now, Temporal unavailable).

The gateway is an adapter over the client: it imports these, and says them in HTTP.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from waitstate.schemas.approvals import DecisionBody
from waitstate.schemas.questions import AnswerBody

# How long the run's description may take, asked for when Temporal refused an Update without
# saying why in anything but words (see `rpc_refusal`); the gateway bounds one look for an
# Update (`TemporalDeliverer.recall`) by it too.
DESCRIBE_TIMEOUT = timedelta(seconds=5)

# What an Update's RPC failure means (`rpc_refusal`); the gateway answers each with the error
# code of the same name.
RpcRefusal = Literal["temporal_unavailable", "unknown_run", "run_ended", "run_unavailable"]


def decision_update_id(request_id: str, body: DecisionBody) -> str:
    """The Update id for one decision on an approval request: identical decisions share it.

    So a burst of them (a double click, a link opened twice, a retry) is one Update, not one
    each: Temporal caps a run's in-flight Updates (10 by default) and refuses the excess with
    RESOURCE_EXHAUSTED, which would reach the sender as a 503. The copies get the first one's
    outcome, which carries its delivery id (see `TemporalDeliverer.decide`).
    """
    return f"decide/{request_id}/{_digest(body)}"


def answer_update_id(question_id: str, body: AnswerBody) -> str:
    """The Update id for one answer to a question: identical answers share it, as identical
    decisions do (see `decision_update_id`), and get its one outcome (see
    `TemporalDeliverer.answer`)."""
    return f"answer/{question_id}/{_digest(body)}"


def _digest(body: BaseModel) -> str:
    """A short hash of a body's canonical JSON: equal bodies, equal digests."""
    text = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


async def rpc_refusal(err: RPCError, handle: WorkflowHandle[Any, Any]) -> RpcRefusal:
    """What an RPC failure of an Update to the run `handle` names means to its sender: the run
    has ended (`run_ended`), there is no such run (`unknown_run`), the run did not take it for
    now (`run_unavailable`), or Temporal is unavailable (`temporal_unavailable`).

    Temporal refuses an Update with NOT_FOUND (or FAILED_PRECONDITION) alike when the run had
    ended before it arrived, when the run ended while it was in flight (a second decision racing
    the first, which let the run finish), and when no such run exists; only its message, in
    words that are Temporal's to change, tells them apart. So the run is described instead.
    """
    if err.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
        # Unreachable server, overload, auth to Temporal...: the caller should try again later.
        return "temporal_unavailable"
    try:
        description = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
    except RPCError as described:
        if described.status == RPCStatusCode.NOT_FOUND:
            return "unknown_run"
        return "temporal_unavailable"
    if description.status not in (None, WorkflowExecutionStatus.RUNNING):
        return "run_ended"
    # Open (the Update met the run as it continued as new, and the next run did not get it):
    # sent again, it reaches the run.
    return "run_unavailable"
