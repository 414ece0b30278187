"""The invariants checked after every run, from the run's own state, the histories of every run
of its continue-as-new chain and what the external systems saw (`/_test/stats`), plus the
checks particular to model faults.

A run whose state or histories could not be read fails `READ`: whatever could not be checked
has not held.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from chaos.app import DELETE_TOOL
from chaos.history import accepted_updates, activity_attempts, signal_inputs, update_inputs
from chaos.runs import MODEL_TIMEOUT, QUESTION_ENDS, REPLIES, RETRY_AFTER, RunOutcome
from chaos.wire import HANG_LIMIT
from examples.systems.refunds import CLAIMS
from waitstate.schemas.run import ANSWER_OPERATION, CALL_TOOL, TERMINAL_STATUSES
from waitstate.testing.wire_server import RecordedRequest

# Invariant names: the rows of the table's second half.
READ = "every run's state and history chain read"
REPLAYS = "every run's histories replay on today's code"
TERMINAL = "every run reaches a terminal status"
EXPECTED = "every run ends as expected"
JOBS = "each external job started once; cancelled ones sent a cancel"
FINISHED = "a job that finished: every report taken, no cancel, its operation ends so"
COMPLETIONS = "each completion applied at most once"
APPROVALS = "each approval applied at most once"
FINAL = "a decision applied is final"
GENUINE = "no genuine webhook or link refused (401/404)"
REFUSED = "no refused request added a history event"
REFUNDS = "an approved refund issued once, a rejected one never"
QUESTIONS = "each question asked once, answered once, as its job saw it; duplicates refused"
INVARIANTS = (
    READ, REPLAYS, TERMINAL, EXPECTED, JOBS, FINISHED, COMPLETIONS, APPROVALS, FINAL, GENUINE, REFUSED,
    REFUNDS, QUESTIONS,
)  # fmt: skip

# A request's outcome as the ledger records it: a person's or the policy's decision, or expiry.
_DECIDED_STEP = re.compile(r"approval (\S+) (approved|rejected) by (\S+)")
_EXPIRED_STEP = re.compile(r"approval (\S+) expired$")
_APPROVAL_STEP = _DECIDED_STEP
_OPERATION_STEP = re.compile(r"^(\S+) (succeeded|failed)$")
# Temporal's closed statuses, as `drive` reports a run that did not return a RunResult.
_CLOSED = {"cancelled", "canceled", "terminated", "timed_out", "failed"}
# A refusal that says an identical report was already taken: the report is not lost.
_TAKEN_CODES = {"duplicate_completion", "duplicate_report"}


def check_run(outcome: RunOutcome, stats: dict[str, Any]) -> dict[str, list[str]]:
    """Every invariant's violations for one run (empty lists: none)."""
    found: dict[str, list[str]] = {name: [] for name in INVARIANTS}
    plan = outcome.plan
    tag = f"{plan.id} ({plan.kind})"
    found[READ] += [f"{tag}: {problem}" for problem in outcome.unread]
    if outcome.state is None and not outcome.unread:
        found[READ].append(f"{tag}: no state")
    found[REPLAYS] += [f"{tag}: {problem}" for problem in outcome.unreplayable]
    if outcome.status not in TERMINAL_STATUSES | _CLOSED:
        found[TERMINAL].append(f"{tag}: still {outcome.status} after {outcome.seconds:.0f}s")
    expected = set(plan.expect.split("|"))
    if "cancelled" in expected:
        expected.add("canceled")
    if outcome.status not in expected and outcome.status not in ("stuck", "unknown"):
        error = outcome.state.error if outcome.state else None
        found[EXPECTED].append(f"{tag}: ended {outcome.status}, expected {plan.expect}: {error}")
    found[EXPECTED] += [f"{tag}: {problem}" for problem in outcome.problems]
    found[EXPECTED] += _operations_expected(tag, outcome)
    keys = run_keys(outcome, stats)
    found[JOBS] += _jobs(tag, outcome, keys, stats)
    found[JOBS] += _mcp_tasks(tag, outcome, stats)
    found[FINISHED] += _finished(tag, outcome, keys, stats)
    found[COMPLETIONS] += _completions(tag, outcome)
    found[APPROVALS] += _approvals(tag, outcome)
    found[FINAL] += _final(tag, outcome)
    found[GENUINE] += _genuine(tag, outcome, keys, stats)
    found[REFUSED] += _refused(tag, outcome, keys, stats)
    found[REFUNDS] += _refunds(tag, outcome, stats)
    found[QUESTIONS] += _questions(tag, outcome, stats)
    return found


def run_keys(outcome: RunOutcome, stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The systems' records of this run's jobs, by idempotency key (`{run}/{tool_call_id}`):
    its own, not its sub-agents' (`{run}/{node}/{tool_call_id}`, chaos.trees checks those)."""
    prefix = f"{outcome.plan.id}/"
    return {
        k: v
        for k, v in stats["keys"].items()
        if k.startswith(prefix) and "/" not in k[len(prefix) :]
    }


def operations_by_key(outcome: RunOutcome) -> dict[str, Any]:
    """The run's operations by the idempotency key their job was started under (the demo
    systems' jobs; an MCP task has no key: `_mcp_tasks` checks those)."""
    state = outcome.state
    return {
        f"{outcome.plan.id}/{op.tool_call_id}": op
        for op in (state.operations.values() if state else [])
        if "__" not in op.tool
    }


def _operations_expected(tag: str, outcome: RunOutcome) -> list[str]:
    wanted = outcome.plan.operations
    if wanted is None or outcome.state is None:
        return []
    ops = list(outcome.state.operations.values())
    if not ops:
        return [f"{tag}: no operation was started (expected them {wanted})"]
    return [
        f"{tag}: operation {op.operation_id} ({op.completion}, {op.mode}) ended {op.status}, "
        f"expected {wanted}{_why(op)}"
        for op in ops
        if op.status != wanted
    ]


def _why(op: Any) -> str:
    return f": {op.error.code}: {op.error.message}" if op.error is not None else ""


def _jobs(
    tag: str, outcome: RunOutcome, keys: dict[str, dict[str, Any]], stats: dict[str, Any]
) -> list[str]:
    """Every job this run's keys created is one the run knows, created once; a job the run
    cancelled (or that expired) was sent a cancel, and is not running."""
    problems = []
    state = outcome.state
    known = operations_by_key(outcome)
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


def _mcp_tasks(tag: str, outcome: RunOutcome, stats: dict[str, Any]) -> list[str]:
    """A run's MCP task (the demo server's report for the run's id): made at most once, and
    once if the run has its operation (run by the server, or known to it: a task cancelled
    while its restarted server had not yet run it again never ran there); a succeeded
    operation's task finished; an expired or cancelled one's was sent a cancel and stopped
    (or had finished), never left running."""
    if not outcome.plan.kind.startswith("mcp-task"):
        return []
    if "mcp" not in stats:
        return [f"{tag}: the MCP server's records were not read"]
    task = stats["mcp"].get(outcome.plan.id, {})
    started = task.get("started", 0)
    ops = [op for op in (outcome.state.operations.values() if outcome.state else [])]
    states = stats.get("mcp_tasks", {})
    problems = []
    if started > 1:
        problems.append(f"{tag}: {started} tasks made for one call")
    for op in ops:
        state = states.get(op.job_id, "unknown")
        if started == 0 and state == "unknown":
            problems.append(f"{tag}: operation {op.operation_id}, but no task on the server")
        ended = task.get("finished", 0) + task.get("cancelled", 0)
        if op.status == "succeeded" and not task.get("finished"):
            problems.append(
                f"{tag}: operation {op.operation_id} succeeded, its task never finished"
            )
        if op.status in ("expired", "cancelled"):
            if op.cancel != "sent":
                problems.append(f"{tag}: {op.status} operation {op.operation_id} never cancelled")
            if ended < 1 and state not in ENDED_TASKS:
                problems.append(
                    f"{tag}: {op.status} operation's task still running (the server says {state})"
                )
    return problems


# What `tasks/get` says of a task that ended (chaos.driver's `_task_states`): finished, failed
# or cancelled.
ENDED_TASKS = frozenset({"succeeded", "tool_error", "task_failed", "task_cancelled"})


def _questions(tag: str, outcome: RunOutcome, stats: dict[str, Any]) -> list[str]:
    """A run whose MCP task asked to confirm a deletion (the demo server's `delete:NAME`): the
    task asked once per question the run recorded; it was given one answer at most, exactly
    one once the run says it delivered it, and deleted or kept the dataset (never both) as
    that answer said; the question closed as the plan's answers should close it, with one
    `answer` Update in its histories; of the answers sent (copies of a link's request aside)
    one was accepted and every other refused, and the copies were told the first's outcome."""
    plan = outcome.plan
    if plan.question is None or outcome.state is None:
        return []
    if "mcp" not in stats:
        return [f"{tag}: the MCP server's records were not read"]
    seen = stats["mcp"].get(f"delete:{plan.id}", {})
    asked, answered, deleted, kept = (
        seen.get(k, 0) for k in ("asked", "answered", "deleted", "kept")
    )
    questions = list(outcome.state.questions.values())
    ops = [op for op in outcome.state.operations.values() if op.tool == DELETE_TOOL]
    problems = [
        f"{tag}: operation {op.operation_id} ended {op.status}{_why(op)}"
        for op in ops
        if op.status != "succeeded"
    ]
    if not ops and interrupted_start(outcome):
        # The run told the model the deletion may or may not have started: its task, if it
        # was made, asks on with no one to answer. Made twice it would have asked twice.
        if asked > 1:
            problems.append(f"{tag}: the task asked {asked} times{_attempts(outcome)}")
        return problems
    if len(questions) != asked:
        problems.append(
            f"{tag}: the task asked {asked} times, the run has {len(questions)} questions"
            f"{_attempts(outcome)}"
        )
    if len(questions) != 1:
        problems.append(f"{tag}: {len(questions)} questions, expected the deletion's one")
    if answered > 1:
        problems.append(f"{tag}: the task was given {answered} answers{_attempts(outcome)}")
    if deleted and kept:
        problems.append(f"{tag}: the dataset was deleted ({deleted}) and kept ({kept})")
    if deleted + kept != answered:
        problems.append(f"{tag}: {answered} answers, but deleted {deleted}, kept {kept}")
    status, end = QUESTION_ENDS[plan.question]
    updates = [u.argument.get("question_id") for u in accepted_updates(outcome.events, "answer")]
    for q in questions:
        where = f"question {q.question_id} ({q.status}, delivery {q.delivery})"
        if q.status != status:
            problems.append(f"{tag}: {where}, expected {status}: {'; '.join(outcome.notes)}")
        if q.delivery != "sent":
            problems.append(
                f"{tag}: {where}: its answer never reached the task: {q.delivery_error}"
            )
            continue
        if answered != 1:
            problems.append(f"{tag}: {where}, but the task was given {answered} answers")
        answer = q.answer
        confirmed = (
            answer is not None
            and answer.action == "accept"
            and (answer.content or {}).get("confirm") is True
        )
        said = "deleted" if confirmed else "kept"
        if (deleted, kept) != ((1, 0) if confirmed else (0, 1)):
            problems.append(
                f"{tag}: {where} says {said}; the server deleted {deleted}, kept {kept}"
            )
        if said != end:
            problems.append(f"{tag}: {where} says {said}, expected {end}")
        by_policy = answer is not None and answer.by_policy
        if by_policy != (plan.question == "expire"):
            problems.append(f"{tag}: {where}: answered by policy: {by_policy}")
        applied = updates.count(q.question_id)
        if applied != (0 if by_policy else 1):
            problems.append(f"{tag}: {where}: {applied} answer Updates accepted in its histories")
    problems += _answers_told(tag, outcome, questions)
    return problems


def interrupted_start(outcome: RunOutcome) -> bool:
    """Whether the run's MCP call may have been sent with its outcome unknown: retried after
    an attempt its worker was killed in, or cut off by the MCP server's restart (its session
    broken mid-call). The call is not repeated, and the model is told its outcome is unknown
    (activities/mcp.py)."""
    steps = outcome.state.steps if outcome.state is not None else []
    return any(
        s.kind == "tool" and s.is_error and "may or may not have taken effect" in s.detail
        for s in steps
    )


def _attempts(outcome: RunOutcome) -> str:
    """The attempts of the activities that make a task and give it answers: a task made twice
    asks twice, an answer given twice may be taken twice (their workers killed mid-call)."""
    made = activity_attempts(outcome.events, CALL_TOOL)
    given = activity_attempts(outcome.events, ANSWER_OPERATION)
    return f" (attempts of call_tool: {made}, of answer_operation: {given})"


def _answers_told(tag: str, outcome: RunOutcome, questions: list[Any]) -> list[str]:
    """What the senders of answers were told: one accepted (none for a question left to
    expire), and it is the answer the question holds; every other refused, not lost; a copy
    of a link's request told what the first was, or, sent once the link had expired (the
    first one's answer having come late), refused as expired."""
    sent = [a for a in outcome.answers if a.kind == "answer"]
    copies = [a for a in sent if a.via == "link (copy)"]
    others = [a for a in sent if a.via != "link (copy)"]
    told = [a for a in others if a.accepted]
    wanted = 0 if outcome.plan.question == "expire" else 1
    problems = []
    if len(told) != wanted:
        said = "; ".join(f"{a.via}: {a.code}" for a in others) or "none sent"
        problems.append(f"{tag}: {len(told)} answers accepted, expected {wanted}: {said}")
    problems += [
        f"{tag}: the answer by {a.via} was neither accepted nor refused: {a.code}"
        for a in others
        if a.accepted is None
    ]
    recorded = {q.question_id: q.answer for q in questions}
    for a in told:
        answer = recorded.get(a.subject)
        if answer is None or (answer.action, answer.content) != REPLIES[a.decision]:
            holds = "nothing" if answer is None else f"{answer.action} {answer.content}"
            problems.append(
                f"{tag}: {a.via} was told its {a.decision} was accepted; the question holds {holds}"
            )
    first = next((a for a in others if a.via == "link"), None)
    for copy in copies:
        if copy.late and copy.code == "410 token_expired":
            continue
        if first is None or (copy.accepted, copy.code) != (first.accepted, first.code):
            problems.append(
                f"{tag}: a copy of the link's answer was told {copy.code}, the first "
                f"{first.code if first else 'was never sent'} ({'; '.join(outcome.notes)})"
            )
    return problems


def report_answers(job: dict[str, Any]) -> dict[str, list[tuple[int | None, str]]]:
    """Every answer to each report of a job (by its Webhook-Id, copies and retries included):
    (status, gateway error code), in the order sent."""
    reports: dict[str, list[tuple[int | None, str]]] = {}
    for attempt in job.get("webhooks", []):
        report_id = attempt.get("webhook_id") or attempt.get("report", "")
        reports.setdefault(report_id, []).append((attempt.get("status_code"), answer_code(attempt)))
    return reports


def report_names(job: dict[str, Any]) -> dict[str, str]:
    """What each report of a job said ('running 33%', 'succeeded'), by its Webhook-Id."""
    return {
        attempt.get("webhook_id") or attempt.get("report", ""): attempt.get("report", "")
        for attempt in job.get("webhooks", [])
    }


def answer_code(attempt: dict[str, Any]) -> str:
    """The gateway's error code in a webhook attempt's recorded answer ('' for none)."""
    try:
        return str(json.loads(attempt.get("answer") or "")["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


def taken(answers: list[tuple[int | None, str]]) -> bool | None:
    """Whether a report was taken: True if some delivery was answered 2xx, or told an
    identical one already was; None if some delivery got no final answer (5xx, no answer: it
    may have been applied, and a later 409 may be its echo); False if it was refused."""
    if any(s is not None and s < 300 or code in _TAKEN_CODES for s, code in answers):
        return True
    if any(s is None or s >= 500 for s, _ in answers):
        return None
    return False if answers else None


def _finished(
    tag: str, outcome: RunOutcome, keys: dict[str, dict[str, Any]], stats: dict[str, Any]
) -> list[str]:
    """A job that succeeded or failed on its own was never told to stop, every report it sent
    was taken (or refused losing nothing, see `_lost_nothing`), and the run's operation ended
    with the job's own status."""
    problems = []
    known = operations_by_key(outcome)
    for key, key_stats in keys.items():
        job = stats["jobs"].get(key_stats.get("job_id") or "", {})
        if job.get("status") not in ("succeeded", "failed"):
            continue
        op = known.get(key)
        where = f"job {key_stats['job_id']} ({job['status']})"
        if key_stats["cancels"]:
            problems.append(f"{tag}: {where} was sent {key_stats['cancels']} cancel(s)")
        if op is not None and op.status != job["status"]:
            problems.append(f"{tag}: {where}: its operation {op.operation_id} ended {op.status}")
        names = report_names(job)
        for report_id, answers in report_answers(job).items():
            report = names[report_id]
            if taken(answers) is False and not _lost_nothing(report, answers, op, job):
                said = ", ".join(f"{s} {c}".strip() for s, c in answers)
                problems.append(f"{tag}: {where}: report '{report}' refused: {said}")
    return problems


def _lost_nothing(
    report: str, answers: list[tuple[int | None, str]], op: Any, job: dict[str, Any]
) -> bool:
    """Whether a refused report lost nothing: it told of the end a status check had already
    found (`operation_resolved`, the operation having ended as the job did), or it asked a
    question the gateway refused as malformed (`invalid_question`: the job heard why, and
    ended on it)."""
    codes = {code for status, code in answers if status is not None and status >= 400}
    if codes == {"operation_resolved"}:
        return op is not None and op.status == job.get("status")
    return codes == {"invalid_question"} and report.startswith("input_required")


def _completions(tag: str, outcome: RunOutcome) -> list[str]:
    """At most one final completion accepted per operation (histories), applied once (ledger)."""
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
    """At most one decision accepted (histories) and applied (ledger) per request; a decided
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


def request_outcomes(outcome: RunOutcome) -> dict[str, list[str]]:
    """Every outcome the ledger records per request, in order: `approved by <reviewer>`,
    `rejected by default`, `expired`."""
    found: dict[str, list[str]] = {}
    for step in outcome.state.steps if outcome.state else []:
        if step.kind != "event":
            continue
        if m := _DECIDED_STEP.search(step.detail):
            found.setdefault(m.group(1), []).append(f"{m.group(2)} by {m.group(3)}")
        elif m := _EXPIRED_STEP.search(step.detail):
            found.setdefault(m.group(1), []).append("expired")
    return found


def _final(tag: str, outcome: RunOutcome) -> list[str]:
    """One outcome per request, and it stays: a person's decision is never followed by the
    policy's (or another), a decision the sender was told was accepted is the request's
    outcome, and a run whose request a person decided does not end for want of a decision."""
    state = outcome.state
    if state is None:
        return []
    problems = []
    outcomes = request_outcomes(outcome)
    for request_id, seen in outcomes.items():
        if len(seen) > 1:
            problems.append(
                f"{tag}: request {request_id} decided, then changed: {' -> '.join(seen)}"
            )
    for answer in outcome.answers:
        if answer.kind != "decision" or not answer.accepted:
            continue
        request = state.approvals.get(answer.subject)
        decision = request.decision if request is not None else None
        told = answer.decision
        wanted = "approved" if told == "approve" else "rejected"
        if request is None or request.status != wanted or decision is None or decision.by_policy:
            if request is None:
                now = "unknown to the run"
            elif request.status == "expired" or decision is None:
                now = request.status
            else:
                now = f"{request.status} by {decision.reviewer}"
            problems.append(
                f"{tag}: {answer.via} told its {told} of {answer.subject} was accepted; the "
                f"request is {now}"
            )
    persons = {
        r
        for r, seen in outcomes.items()
        if any(not s.endswith(("by default", "expired")) for s in seen)
    }
    if outcome.status == "approval_expired" and persons:
        problems.append(f"{tag}: ended approval_expired, though a person decided {sorted(persons)}")
    return problems


def _genuine(
    tag: str, outcome: RunOutcome, keys: dict[str, dict[str, Any]], stats: dict[str, Any]
) -> list[str]:
    """The tokens the run handed out work: no webhook of its jobs and no link of its notices
    is refused as forged (401) or as unknown to the run (404), whichever key signed it."""
    problems = []
    for key_stats in keys.values():
        job = stats["jobs"].get(key_stats.get("job_id") or "", {})
        names = report_names(job)
        for report_id, answers in report_answers(job).items():
            bad = [f"{s} {c}" for s, c in answers if s in (401, 404)]
            if bad:
                problems.append(
                    f"{tag}: job {key_stats['job_id']} report '{names[report_id]}' answered "
                    f"{', '.join(bad)}"
                )
    for answer in outcome.answers:
        if answer.status in (401, 404) and answer.via not in ("late", "late (clock behind)"):
            problems.append(
                f"{tag}: {answer.via} for {answer.subject} answered {answer.status} {answer.code}"
            )
    return problems


def _refused(
    tag: str, outcome: RunOutcome, keys: dict[str, dict[str, Any]], stats: dict[str, Any]
) -> list[str]:
    """A refused request leaves no trace: per operation, the completions the run accepted (its
    histories' Updates) are no more than the reports and late completions answered 2xx, plus
    those never answered (5xx: their fate unknown to the sender); per request, the decide
    Updates accepted are no more than the decisions answered as accepted."""
    if outcome.state is None or not outcome.chain:
        return []
    problems = []
    events = accepted_updates(outcome.events)
    known = operations_by_key(outcome)
    for key, key_stats in keys.items():
        op = known.get(key)
        if op is None or op.completion != "callback":
            continue
        job = stats["jobs"].get(key_stats.get("job_id") or "", {})
        fates = [taken(a) for a in report_answers(job).values()]
        fates += [a.accepted for a in outcome.answers if a.subject == op.operation_id]
        accepted, unknown = fates.count(True), fates.count(None)
        recorded = sum(
            1
            for u in events
            if u.name == "complete_operation" and u.argument.get("operation_id") == op.operation_id
        )
        if recorded > accepted + unknown:
            refused = fates.count(False)
            problems.append(
                f"{tag}: operation {op.operation_id}: {recorded} completions in history, "
                f"{accepted} accepted, {refused} refused (a refused request added events)"
            )
    for request_id in outcome.state.approvals:
        fates = [
            a.accepted
            for a in outcome.answers
            if a.kind == "decision" and a.subject == request_id and a.via != "signal"
        ]
        recorded = sum(
            1 for u in events if u.name == "decide" and u.argument.get("request_id") == request_id
        )
        if recorded > fates.count(True) + fates.count(None):
            problems.append(
                f"{tag}: request {request_id}: {recorded} decide Updates in history, "
                f"{fates.count(True)} answered as accepted, {fates.count(False)} refused"
            )
    return problems


def _refunds(tag: str, outcome: RunOutcome, stats: dict[str, Any]) -> list[str]:
    """An approved refund was issued (or refused on its merits, see `_no_room`: never lost);
    a refund not approved was never issued."""
    plan = outcome.plan
    if plan.refund_key is None or outcome.state is None:
        return []
    issued = stats.get("refund_keys", {}).get(plan.refund_key)
    approved = any(r.status == "approved" for r in outcome.state.approvals.values())
    if approved and issued is None and not _no_room(outcome, stats.get("refunds", [])):
        return [f"{tag}: approved refund {plan.refund_key} never issued"]
    if not approved and issued is not None:
        return [f"{tag}: refund {plan.refund_key} issued without approval"]
    return []


# The refund service's refusal of a refund its claim has too little left for
# (examples/systems/refunds.py), as the run's `issue_refund` call read it.
NO_ROOM = "exceeds what is left on claim"


def _no_room(outcome: RunOutcome, refunds: list[dict[str, Any]]) -> bool:
    """Whether the run's approved refund was refused on its merits, not lost: its
    `issue_refund` call came back with the refund service's answer that the refund exceeds
    what is left on the claim (a tool error, which the model read), and the refunds the
    service issued on the claim (`GET /refunds`) do leave too little for it.

    The mix's refunds are bounded by their claims (C-118's 420.00 holds four of its refunds
    over the approval threshold), and a phase's refund runs run at once: when a seed's mix
    approves more of a claim's refunds than it holds, the service refuses whichever comes
    last (full size, seed 2: five of C-118's, 504.56 in all)."""
    assert outcome.plan.refund_key is not None and outcome.state is not None
    _, claim_id, amount = outcome.plan.refund_key.split("/")
    claim = CLAIMS.get(claim_id)
    told = any(
        s.kind == "tool" and s.name == "issue_refund" and s.is_error and NO_ROOM in s.detail
        for s in outcome.state.steps
    )
    refunded = sum(r["amount"] for r in refunds if r["claim_id"] == claim_id)
    return claim is not None and told and round(refunded + float(amount), 2) > claim.amount


def refunds_once(stats: dict[str, Any], refunds: list[dict[str, Any]]) -> list[str]:
    """Across all runs: one refund per key, and no refund outside a key."""
    ids = Counter(r["refund_id"] for r in refunds)
    keyed = {v["refund_id"] for v in stats.get("refund_keys", {}).values()}
    problems = [f"refund {r} issued {n} times" for r, n in ids.items() if n > 1]
    problems += [f"refund {r} issued under no key" for r in ids if r not in keyed]
    return problems


def check_model_fault(outcome: RunOutcome, requests: list[RecordedRequest]) -> list[str]:
    """The fault was met and handled: a 429's retry-after honoured, a hung call cut by the model
    timeout and retried while it still hung, a 500 retried, malformed arguments reported to the
    model."""
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
    # The hung call is answered only once its retry arrives (chaos.wire), or after HANG_LIMIT:
    # then the timeout did not cut it.
    hung = mine[0]
    if plan.fault == "hang" and (hung.answered_at or 0) - hung.received_at >= HANG_LIMIT:
        timeout = MODEL_TIMEOUT.total_seconds()
        return [f"{tag}: no retry within {HANG_LIMIT:.0f}s of a hung call (timeout {timeout}s)"]
    if (
        plan.fault == "hang"
        and hung.answered_at is not None
        and hung.answered_at < mine[1].received_at
    ):
        return [f"{tag}: the hung call was answered before its retry arrived"]
    if plan.fault == "500" and len(mine) < 3:
        return [f"{tag}: {len(mine)} requests after two 500s"]
    steps = outcome.state.steps if outcome.state is not None else []
    if plan.fault == "malformed" and not any(s.kind == "tool" and s.is_error for s in steps):
        return [f"{tag}: malformed arguments were not reported as a tool error"]
    return []
