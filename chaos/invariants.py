"""The invariants checked after every run, from the run's own state and history and from what
the external systems saw (`/_test/stats`), plus the checks particular to model faults."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from chaos.runs import (
    HANG_SECONDS,
    MODEL_TIMEOUT,
    RETRY_AFTER,
    RunOutcome,
    signal_inputs,
    update_inputs,
)
from examples.wire_server import RecordedRequest
from schemas.run import TERMINAL_STATUSES

# Invariant names: the rows of the table's second half.
TERMINAL = "every run reaches a terminal status"
EXPECTED = "every run ends as expected"
JOBS = "each external job started once; cancelled ones sent a cancel"
COMPLETIONS = "each completion applied at most once"
APPROVALS = "each approval applied at most once"
REFUNDS = "an approved refund issued once, a rejected one never"
INVARIANTS = (TERMINAL, EXPECTED, JOBS, COMPLETIONS, APPROVALS, REFUNDS)

_APPROVAL_STEP = re.compile(r"approval (\S+) (approved|rejected) by")
_OPERATION_STEP = re.compile(r"^(\S+) (succeeded|failed)$")
# Temporal's closed statuses, as `drive` reports a run that did not return a RunResult.
_CLOSED = {"cancelled", "canceled", "terminated", "timed_out", "failed"}


def check_run(outcome: RunOutcome, stats: dict[str, Any]) -> dict[str, list[str]]:
    """Every invariant's violations for one run (empty lists: none)."""
    found: dict[str, list[str]] = {name: [] for name in INVARIANTS}
    plan = outcome.plan
    tag = f"{plan.id} ({plan.kind})"
    if outcome.status not in TERMINAL_STATUSES | _CLOSED:
        found[TERMINAL].append(f"{tag}: still {outcome.status} after {outcome.seconds:.0f}s")
    expected = {"cancelled", "canceled"} if plan.expect == "cancelled" else {plan.expect}
    if outcome.status not in expected and outcome.status not in ("stuck", "unknown"):
        error = outcome.state.error if outcome.state else None
        found[EXPECTED].append(f"{tag}: ended {outcome.status}, expected {plan.expect}: {error}")
    found[EXPECTED] += [f"{tag}: {problem}" for problem in outcome.problems]
    found[JOBS] += _jobs(tag, outcome, stats)
    found[COMPLETIONS] += _completions(tag, outcome)
    found[APPROVALS] += _approvals(tag, outcome)
    found[REFUNDS] += _refunds(tag, outcome, stats)
    return found


def _jobs(tag: str, outcome: RunOutcome, stats: dict[str, Any]) -> list[str]:
    """Every job this run's keys created is one the run knows, created once; a job the run
    cancelled (or that expired) was sent a cancel."""
    problems = []
    state = outcome.state
    keys = {k: v for k, v in stats["keys"].items() if k.startswith(f"{outcome.plan.id}/")}
    known = {
        f"{outcome.plan.id}/{op.tool_call_id}": op
        for op in (state.operations.values() if state else [])
    }
    for key, key_stats in keys.items():
        if key_stats["jobs_created"] != 1:
            problems.append(f"{tag}: key {key} created {key_stats['jobs_created']} jobs")
        if state is not None and key not in known:
            problems.append(f"{tag}: job {key_stats['job_id']} under {key} unknown to the run")
    for key, op in known.items():
        if key not in keys:
            problems.append(f"{tag}: operation {op.operation_id} has no job under {key}")
            continue
        if op.status in ("expired", "cancelled"):
            if keys[key]["cancels"] < 1:
                problems.append(f"{tag}: {op.status} operation {op.operation_id} never cancelled")
            job = stats["jobs"].get(op.job_id, {})
            if job.get("status") == "running":
                problems.append(f"{tag}: {op.status} operation's job {op.job_id} still running")
    return problems


def _completions(tag: str, outcome: RunOutcome) -> list[str]:
    """At most one final completion accepted per operation (history), applied once (ledger)."""
    problems = []
    final = Counter(
        u["operation_id"]
        for u in update_inputs(outcome.events, "complete_operation")
        + signal_inputs(outcome.events, "operation_completed")
        if u.get("completion", {}).get("status") in ("succeeded", "failed")
    )
    problems += [
        f"{tag}: {n} final completions of {op} accepted" for op, n in final.items() if n > 1
    ]
    if outcome.state is not None:
        applied = Counter(
            m.group(1)
            for step in outcome.state.steps
            if step.kind == "event" and (m := _OPERATION_STEP.match(step.detail))
        )
        problems += [
            f"{tag}: operation {op} applied {n} times" for op, n in applied.items() if n > 1
        ]
    return problems


def _approvals(tag: str, outcome: RunOutcome) -> list[str]:
    """At most one decision accepted (history) and applied (ledger) per request; a decided
    request's decision is the first one sent."""
    problems = []
    accepted = Counter(u["request_id"] for u in update_inputs(outcome.events, "decide"))
    problems += [
        f"{tag}: {n} decide updates accepted for {r}" for r, n in accepted.items() if n > 1
    ]
    if outcome.state is None:
        return problems
    applied = Counter(
        m.group(1)
        for step in outcome.state.steps
        if step.kind == "event" and (m := _APPROVAL_STEP.search(step.detail))
    )
    problems += [f"{tag}: approval {r} applied {n} times" for r, n in applied.items() if n > 1]
    plan = outcome.plan
    if plan.category == "approval" and not outcome.state.approvals:
        problems.append(f"{tag}: no approval was requested")
    if plan.decider == "timeout":
        problems += _timed_out(tag, outcome)
    if plan.decider in ("signal", "update", "link"):
        for request in outcome.state.approvals.values():
            wanted = "approved" if plan.decision == "approve" else "rejected"
            if request.status != wanted:
                problems.append(
                    f"{tag}: approval {request.request_id} is {request.status}, the first "
                    f"decision sent was {plan.decision} ({'; '.join(outcome.notes)})"
                )
    return problems


def _timed_out(tag: str, outcome: RunOutcome) -> list[str]:
    """Nobody decided: the policy's outcome, and nothing else, was applied."""
    assert outcome.state is not None
    problems = []
    for request in outcome.state.approvals.values():
        policy = request.policy.on_timeout
        wanted = {"default": "approved", "fail": "expired", "escalate": "expired"}[policy]
        if request.status != wanted:
            problems.append(f"{tag}: {policy} policy left {request.request_id} {request.status}")
        if policy == "escalate" and not request.escalated:
            problems.append(f"{tag}: {request.request_id} expired without escalating")
        decision = request.decision
        if decision is not None and not decision.by_policy:
            problems.append(f"{tag}: {request.request_id} decided by {decision.reviewer}")
    return problems


def _refunds(tag: str, outcome: RunOutcome, stats: dict[str, Any]) -> list[str]:
    plan = outcome.plan
    if plan.refund_key is None or outcome.state is None:
        return []
    issued = stats.get("refund_keys", {}).get(plan.refund_key)
    approved = any(r.status == "approved" for r in outcome.state.approvals.values())
    if approved and issued is None:
        return [f"{tag}: approved refund {plan.refund_key} never issued"]
    if not approved and issued is not None:
        return [f"{tag}: refund {plan.refund_key} issued without approval"]
    return []


def refunds_once(stats: dict[str, Any], refunds: list[dict[str, Any]]) -> list[str]:
    """Across all runs: one refund per key, and no refund outside a key."""
    ids = Counter(r["refund_id"] for r in refunds)
    keyed = {v["refund_id"] for v in stats.get("refund_keys", {}).values()}
    problems = [f"refund {r} issued {n} times" for r, n in ids.items() if n > 1]
    problems += [f"refund {r} issued under no key" for r in ids if r not in keyed]
    return problems


def check_model_fault(outcome: RunOutcome, requests: list[RecordedRequest]) -> list[str]:
    """The fault was met and handled: a 429's retry-after honoured, a hang cut at the model
    timeout and retried, a 500 retried, malformed arguments reported to the model."""
    plan = outcome.plan
    tag = f"{plan.id} ({plan.kind})"
    mine = sorted(
        (r for r in requests if isinstance(r.body, dict) and r.body.get("model") == plan.id),
        key=lambda r: r.received_at,
    )
    if len(mine) < 2:
        return [f"{tag}: {len(mine)} model requests, expected a retry after the fault"]
    gap = mine[1].received_at - (mine[0].answered_at or mine[0].received_at)
    if plan.fault == "429" and gap < RETRY_AFTER:
        return [f"{tag}: retried {gap:.2f}s after a 429 with retry-after {RETRY_AFTER}"]
    # The hung attempt was cut by the model timeout: the retry came before the hang ended
    # (the gap is not the timeout itself: the timeout counts from the activity's start).
    if plan.fault == "hang" and gap >= HANG_SECONDS:
        timeout = MODEL_TIMEOUT.total_seconds()
        return [f"{tag}: retried {gap:.2f}s after a {HANG_SECONDS}s hang (timeout {timeout}s)"]
    if plan.fault == "500" and len(mine) < 3:
        return [f"{tag}: {len(mine)} requests after two 500s"]
    steps = outcome.state.steps if outcome.state is not None else []
    if plan.fault == "malformed" and not any(s.kind == "tool" and s.is_error for s in steps):
        return [f"{tag}: malformed arguments were not reported as a tool error"]
    return []
