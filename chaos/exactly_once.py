"""The fault classes of issue 11 ("exactly once, for real"): the runs that make the suite see a
completion, a cancel or a person's decision being lost, and their rows in the table.

7. Progress reports: jobs that post `running` reports, then the final one, every one of them
   before the start activity has returned (the early systems hold the start's answer past the
   job), or after it (the main systems: every callback job of the mix reports progress).
8. Expiry in every mode: callback+await, callback+handle, poll+await, poll+handle, on jobs that
   outlast a short operation timeout; then late completions with the job's token, as from a
   job that ignored its cancel (expired token: 410) and from a gateway whose clock is behind
   (still valid: the run must refuse it, 409). Each operation ends `expired`, its job is sent
   one cancel (more only as retries of a cancel cut short by a worker's death, counted in the
   histories) and is not running, and nothing late added a history event.
9. Continue-as-new while waiting (an event limit of 10), and right after an expiry (two
   handle-mode exports on slow jobs, a 3 s timeout): the chain of runs is followed, every
   completion reaches the run that waits, every cancel owed is sent.
10. Key rotation mid-run: every signing worker is SIGKILLed and restarted signing with the new
    key while approval links and callback tokens minted under the old one are out (one
    escalates after the rotation; one start is held at the systems across it, so it is
    retried by a worker of the new key); then runs mint under the new key. Every link and
    webhook must still work.
11. Decisions racing the timeout policy: short approval windows, a person's decision sent the
    moment the request appears (while the run still sends its notice), around the deadline,
    or late. Either may win; the loser changes nothing.

The invariants of chaos.invariants hold for these runs as for all; each row here adds what
its class is about, counted, and the driver adds the violations of the class's runs.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from chaos.history import accepted_updates, cancel_attempts, carried, tool_starts
from chaos.invariants import operations_by_key, report_answers, report_names, run_keys, taken
from chaos.model import Check
from chaos.runs import EXPORT_TOOLS, Answer, Category, RunOutcome, RunPlan
from chaos.sizes import Size
from waitstate.schemas import RunInput
from waitstate.schemas.approvals import ApprovalPolicy, DecisionKind
from waitstate.schemas.operations import TERMINAL_OPERATION_STATUSES

PROGRESS_BEFORE = "7 progress before the start returns"
PROGRESS_AFTER = "7 progress after the start returns"
EXPIRY = {
    ("callback", "await"): "8 expiry: callback+await",
    ("callback", "handle"): "8 expiry: callback+handle",
    ("poll", "await"): "8 expiry: poll+await",
    ("poll", "handle"): "8 expiry: poll+handle",
}
CAN_WAITING = "9 continue-as-new while waiting"
CAN_EXPIRY = "9 continue-as-new right after an expiry"
ROTATION = "10 key rotation mid-run (old -> new)"
RACE = "11 decisions racing the timeout policy"
ROWS = (PROGRESS_BEFORE, PROGRESS_AFTER, *EXPIRY.values(), CAN_WAITING, CAN_EXPIRY, ROTATION, RACE)

# Held answers on the early systems: past the export, so every report beats the answer.
HOLD_START_ANSWERS = 3.0
PROGRESS_REPORTS = 2
# The early systems send each report twice (a copy must be recognised, not applied again).
EARLY_COPIES = 2
# Long enough for a start retried after its worker was killed (the tool timeout, then the held
# answer), short enough that an operation whose completion was lost ends within the suite.
EARLY_TIMEOUT = timedelta(seconds=30)
EXPIRY_TIMEOUT = timedelta(seconds=2)
CAN_EXPIRY_TIMEOUT = timedelta(seconds=3)
CAN_EVENTS = 10  # the smallest limit a run accepts
# The race windows: shorter than sending the notice, about as long, and longer.
RACE_WINDOWS = (0.1, 0.3, 1.0)
RACE_MOMENTS: tuple[Literal["at-once", "at-deadline", "late"], ...] = (
    "at-once",
    "at-deadline",
    "late",
)
EXPORT_TASK = "Export Q3 transactions and file them in the compliance folder"


def _export(**fields: Any) -> RunInput:
    return RunInput(task=EXPORT_TASK, tools=EXPORT_TOOLS, **fields)


def _scripted(script: str, tools: list[str], **fields: Any) -> RunInput:
    return RunInput(task=script, model=f"scripted:{script}", tools=tools, **fields)


def plans(prefix: str, mix: Size, rng: random.Random, *, phase: str) -> list[RunPlan]:
    """The runs of classes 7 (before the start returns), 8, 9 and 11; class 7 after the start
    returns is every callback run of the main mix, class 10 is `rotation_plans`."""
    out: list[RunPlan] = []
    for i in range(mix.early):
        kind, run = [
            ("export", _export(operation_timeout=EARLY_TIMEOUT)),
            ("two-exports", _scripted("two-exports", ["start_export"], operation_timeout=EARLY_TIMEOUT)),
            ("check-and-wait", _scripted("check-and-wait", ["start_export"], operation_timeout=EARLY_TIMEOUT, operation_mode="handle")),
        ][i % 3]  # fmt: skip
        out.append(
            RunPlan(f"{prefix}-early-{i:03d}", f"early-{kind}", "callback", run,
                    klass=PROGRESS_BEFORE, queue="early", operations="succeeded")
        )  # fmt: skip
    for i in range(mix.expiry):
        for (completion, mode), row in EXPIRY.items():
            timeout = {"operation_timeout": EXPIRY_TIMEOUT, "operation_mode": mode}
            if completion == "callback":
                # Then asks a person, so the run is still open when the late ones arrive.
                run = _scripted("expire-then-ask", ["start_export", "request_approval"], **timeout)
                plan = RunPlan(
                    f"{prefix}-expiry-callback-{mode}-{i:03d}",
                    f"expiry-callback-{mode}",
                    "callback",
                    run,
                    decider="signal",
                    late_completions=True,
                )
            else:
                run = _scripted("enrich", ["enrich_dataset"], **timeout)
                plan = RunPlan(
                    f"{prefix}-expiry-poll-{mode}-{i:03d}", f"expiry-poll-{mode}", "polled", run
                )
            plan.klass, plan.queue, plan.operations = row, "slow", "expired"
            out.append(plan)  # fmt: skip
    for i in range(mix.can):
        limit = {"continue_as_new_after_events": CAN_EVENTS}
        choices: list[tuple[str, Category, RunInput]] = [
            ("export", "callback", _export(**limit)),
            ("two-exports", "callback", _scripted("two-exports", ["start_export"], **limit)),
            ("check-and-wait", "callback", _scripted("check-and-wait", ["start_export"], operation_mode="handle", **limit)),
            ("enrich", "polled", _scripted("enrich", ["enrich_dataset"], **limit)),
        ]  # fmt: skip
        kind, category, run = choices[i % len(choices)]
        out.append(
            RunPlan(f"{prefix}-can-{i:03d}", f"can-{kind}", category, run, klass=CAN_WAITING,
                    operations="succeeded")
        )  # fmt: skip
    for i in range(mix.can_expiry):
        run = _scripted(
            "two-exports", ["start_export"], operation_mode="handle",
            operation_timeout=CAN_EXPIRY_TIMEOUT, continue_as_new_after_events=CAN_EVENTS,
        )  # fmt: skip
        out.append(
            RunPlan(f"{prefix}-can-expiry-{i:03d}", "can-expiry-two-exports", "callback", run,
                    klass=CAN_EXPIRY, queue="slow", operations="expired", late_completions=True)
        )  # fmt: skip
    for i in range(mix.races):
        # Every policy meets every moment and window as the count grows (not in lockstep).
        on_timeout = ("default", "fail", "escalate")[i % 3]
        moment: Literal["at-once", "at-deadline", "late"] = RACE_MOMENTS[(i + i // 3) % 3]
        window = RACE_WINDOWS[(i + i // 3 + i // 9) % len(RACE_WINDOWS)]
        decision: DecisionKind = rng.choice(["approve", "reject"])
        policy = ApprovalPolicy(
            timeout=timedelta(seconds=window),
            on_timeout=on_timeout,
            # The policy's decision is the other one, so an overwrite cannot pass unseen.
            default_decision="reject" if decision == "approve" else "approve",
        )
        run = _scripted("ask-first", ["request_approval"], approval=policy)
        expect = "completed|approval_expired" if on_timeout == "fail" else "completed"
        out.append(
            RunPlan(f"{prefix}-race-{i:03d}", f"race-{on_timeout}-{moment}", "approval", run,
                    expect, decider="race", decision=decision, klass=RACE, race=moment)
        )  # fmt: skip
    for plan in out:
        plan.phase = phase
    return out


def rotation_plans(prefix: str, rounds: int, window: timedelta, *, phase: str) -> list[RunPlan]:
    """Per round: links and callback tokens minted under the old key and used after the
    rotation (a first link after its request escalated under the new key, an escalation link,
    a plain link, a start held across the rotation, a webhook), then a link and a webhook
    minted under the new key. `window`: the escalating requests' timeout, past the rotation."""
    escalating = ApprovalPolicy(timeout=window, on_timeout="escalate")
    out: list[RunPlan] = []
    for r in range(rounds):
        ask = _scripted("ask-first", ["request_approval"], approval=escalating)
        plain_ask = _scripted("ask-first", ["request_approval"])
        out += [
            RunPlan(f"{prefix}-{r}-first-link", "rotation-first-link", "approval", ask,
                    decider="link", rotation="before", link="first"),
            RunPlan(f"{prefix}-{r}-escalation-link", "rotation-escalation-link", "approval",
                    ask.model_copy(), decider="link", rotation="before", link="escalation"),
            RunPlan(f"{prefix}-{r}-link", "rotation-link", "approval", plain_ask,
                    decider="link", rotation="before"),
            RunPlan(f"{prefix}-{r}-held-start", "rotation-held-start", "callback",
                    _export(operation_timeout=EARLY_TIMEOUT), queue="early", rotation="before",
                    operations="succeeded"),
            RunPlan(f"{prefix}-{r}-webhook", "rotation-webhook", "callback", _export(),
                    rotation="before", operations="succeeded"),
            RunPlan(f"{prefix}-{r}-after-link", "rotation-after-link", "approval",
                    plain_ask.model_copy(), decider="link", rotation="after"),
            RunPlan(f"{prefix}-{r}-after-webhook", "rotation-after-webhook", "callback", _export(),
                    rotation="after", operations="succeeded"),
        ]  # fmt: skip
    for plan in out:
        plan.klass, plan.phase = ROTATION, phase
    return out


@dataclass
class Rotation:
    """What the key rotation did, for its row."""

    happened: bool = False
    seconds: float = 0.0
    workers: int = 0
    note: str = ""


# --- the rows --------------------------------------------------------------------------------


def rows(
    outcomes: list[RunOutcome], stats: dict[str, Any], rotation: Rotation | None
) -> list[Check]:
    """One row per class of issue 11, with its counts and what its runs must show."""
    mine = {row: [o for o in outcomes if o.plan.klass == row] for row in ROWS}
    main_callbacks = [
        o
        for o in outcomes
        if o.plan.queue == "main" and any(op.completion == "callback" for op in _ops(o))
    ]
    checks = [
        _progress(PROGRESS_BEFORE, mine[PROGRESS_BEFORE], stats, must_beat=True),
        _progress(PROGRESS_AFTER, main_callbacks, stats, must_beat=False),
        *(_expiry(row, mine[row], stats) for row in EXPIRY.values()),
        _continued(CAN_WAITING, mine[CAN_WAITING], stats),
        _continued(CAN_EXPIRY, mine[CAN_EXPIRY], stats),
        _rotation(mine[ROTATION], stats, rotation),
        _races(mine[RACE]),
    ]
    return checks


def _ops(outcome: RunOutcome) -> list[Any]:
    return list(outcome.state.operations.values()) if outcome.state else []


def _tally(values: Iterable[object]) -> str:
    counts = Counter(str(v) for v in values)
    return " ".join(f"{n}×{v}" for v, n in sorted(counts.items())) or "none"


def _progress(
    name: str, outcomes: list[RunOutcome], stats: dict[str, Any], *, must_beat: bool
) -> Check:
    """Reports sent, taken before / after the start returned (from the histories), refused."""
    check = Check(name)
    jobs = reports = progress = before = after = 0
    refused: Counter[str] = Counter()
    for outcome in outcomes:
        for key_stats in run_keys(outcome, stats).values():
            job = stats["jobs"].get(key_stats.get("job_id") or "", {})
            if not job.get("webhooks"):
                continue
            jobs += 1
            names = report_names(job)
            for report_id, answers in report_answers(job).items():
                reports += 1
                progress += names[report_id].startswith("running")
                if taken(answers) is False:
                    refused.update(f"{s} {c}" for s, c in answers if s and s >= 400)
        b, a = _taken_around_start(outcome)
        before, after = before + b, after + a
        if must_beat and not b and outcome.state is not None:
            outcome.notes.append("no report reached the run before its start returned")
    check.attempts = reports
    check.outcome = (
        f"{len(outcomes)} runs, {jobs} jobs, {reports} reports ({progress} progress): taken "
        f"{before} before the start returned, {after} after; refused {_tally(refused.elements())}"
    )
    if must_beat and outcomes and not before:
        check.violations.append("no report reached a run before its start returned (not exercised)")
    return check


def _taken_around_start(outcome: RunOutcome) -> tuple[int, int]:
    """Completions the run accepted before the start of their operation returned, and after."""
    before = after = 0
    for events in outcome.chain:
        starts = tool_starts(events)
        for update in accepted_updates(events, "complete_operation"):
            start = starts.get(str(update.argument.get("operation_id")))
            done = start.completed_event_id if start is not None else None
            if start is not None and (done is None or update.event_id < done):
                before += 1
            else:
                after += 1
    return before, after


def _late(answers: Iterable[Answer]) -> list[Answer]:
    return [a for a in answers if a.kind == "completion" and a.via.startswith("late")]


def _expiry(name: str, outcomes: list[RunOutcome], stats: dict[str, Any]) -> Check:
    """Every operation expired, its job sent exactly one cancel and not running; every late
    completion refused."""
    check = Check(name)
    statuses: Counter[str] = Counter()
    cancels: Counter[int] = Counter()
    late: list[Answer] = []
    for outcome in outcomes:
        tag = f"{outcome.plan.id} ({outcome.plan.kind})"
        check.violations += _cancelled_once(tag, outcome, stats, cancels)
        statuses.update(op.status for op in _ops(outcome))
        late += _late(outcome.answers)
    check.violations += [
        f"{a.subject}: a late completion ({a.via}) answered {a.status} {a.code}"
        for a in late
        if a.accepted
    ]
    check.attempts = sum(statuses.values())
    check.outcome = (
        f"{len(outcomes)} runs, {_tally(statuses.elements())} ops; cancels per job "
        f"{_tally(cancels.elements())}; late completions refused: "
        f"{_tally(f'{a.status} {a.code}' for a in late if not a.accepted)}"
    )
    return check


def _cancelled_once(
    tag: str, outcome: RunOutcome, stats: dict[str, Any], cancels: Counter[int]
) -> list[str]:
    """Each expired or cancelled operation's job was told to stop, once: no more often than
    the run's cancel attempts (a worker killed mid-cancel makes a second attempt), and it is
    not running."""
    problems = []
    keys = run_keys(outcome, stats)
    attempts = cancel_attempts(outcome.chain)
    for key, op in operations_by_key(outcome).items():
        if op.status not in ("expired", "cancelled") or key not in keys:
            continue
        sent = keys[key]["cancels"]
        cancels[sent] += 1
        tried = attempts.get(op.operation_id, 0)
        if sent < 1 or sent > max(tried, 1):
            problems.append(
                f"{tag}: {op.status} operation {op.operation_id}'s job got {sent} cancels "
                f"({tried} cancel attempts in the run's histories)"
            )
        job = stats["jobs"].get(op.job_id, {})
        if job.get("status") == "running":
            problems.append(f"{tag}: {op.status} operation {op.operation_id}'s job still running")
    return problems


def _continued(name: str, outcomes: list[RunOutcome], stats: dict[str, Any]) -> Check:
    """Runs continued as new while waiting: counted from what each continuation carried; the
    chain the histories show is the one the state counts; cancels owed were sent once."""
    check = Check(name)
    continues = pending = mid_turn = after_expiry = 0
    statuses: Counter[str] = Counter()
    cancels: Counter[int] = Counter()
    for outcome in outcomes:
        tag = f"{outcome.plan.id} ({outcome.plan.kind})"
        if outcome.state is None or not outcome.chain:
            continue  # READ reports it
        statuses.update(op.status for op in _ops(outcome))
        runs = len(outcome.chain)
        if outcome.state.continued_as_new != runs - 1:
            check.violations.append(
                f"{tag}: the state says {outcome.state.continued_as_new} continues, the "
                f"histories show {runs} runs"
            )
        if runs < 2:
            check.violations.append(f"{tag}: never continued as new (limit {CAN_EVENTS} events)")
        carries = carried(outcome.chain)
        continues += len(carries)
        seen: dict[str, str] = {}
        for carry in carries:
            ops = (carry.get("state") or {}).get("operations") or {}
            now = {op_id: str(op.get("status", "running")) for op_id, op in ops.items()}
            pending += any(s not in TERMINAL_OPERATION_STATUSES for s in now.values())
            mid_turn += bool(carry.get("turn"))
            after_expiry += any(s == "expired" and seen.get(i) != "expired" for i, s in now.items())
            seen = now
        if outcome.plan.operations == "expired":
            check.violations += _cancelled_once(tag, outcome, stats, cancels)
    check.attempts = continues
    check.outcome = (
        f"{len(outcomes)} runs continued {continues} times: {pending} with an operation "
        f"pending, {mid_turn} mid-turn, {after_expiry} right after an expiry; ops "
        f"{_tally(statuses.elements())}"
    )
    if name == CAN_EXPIRY and outcomes and not after_expiry:
        check.violations.append("no run continued as new right after an expiry (not exercised)")
    return check


def _rotation(
    outcomes: list[RunOutcome], stats: dict[str, Any], rotation: Rotation | None
) -> Check:
    """Links and callbacks minted under either key work after the rotation."""
    check = Check(ROTATION)
    if rotation is None or not outcomes:
        check.outcome = "not run at this size"
        return check
    links = [a for o in outcomes for a in o.answers if a.kind == "decision"]
    old_links = [
        o
        for o in outcomes
        if o.plan.rotation == "before" and o.plan.decider == "link" and o.plan.link == "first"
    ]
    escalated = [o for o in old_links if o.plan.input.approval.on_timeout == "escalate"]
    new_links = [
        o
        for o in outcomes
        if o.plan.decider == "link" and (o.plan.rotation == "after" or o.plan.link == "escalation")
    ]
    callbacks = [o for o in outcomes if o.plan.category == "callback"]
    old_callbacks = [o for o in callbacks if o.plan.rotation == "before"]
    retried = sum(
        any(k["starts"] > 1 for k in run_keys(o, stats).values())
        for o in old_callbacks
        if o.plan.queue == "early"
    )
    webhooks = []
    for outcome in callbacks:
        for key_stats in run_keys(outcome, stats).values():
            job = stats["jobs"].get(key_stats.get("job_id") or "", {})
            webhooks += [a.get("status_code") for a in job.get("webhooks", [])]
    if not rotation.happened:
        check.violations.append(f"the signing key was not rotated: {rotation.note}")
    for outcome in outcomes:
        for answer in outcome.answers:
            if answer.kind == "decision" and not answer.accepted:
                check.violations.append(
                    f"{outcome.plan.id}: its {answer.via} answered {answer.status} {answer.code}"
                )
    check.attempts = len(links) + len(webhooks)
    check.outcome = (
        f"old -> new in {rotation.seconds:.1f}s ({rotation.workers} workers restarted); "
        f"links minted under old used after: {len(old_links)} ({len(escalated)} after an "
        f"escalation under new), under new: {len(new_links)}; callbacks minted under old: "
        f"{len(old_callbacks)} ({retried} starts retried under new), under new: "
        f"{len(callbacks) - len(old_callbacks)}; links {_tally(a.status for a in links)}, "
        f"webhooks {_tally(webhooks)}"
    )
    return check


def _races(outcomes: list[RunOutcome]) -> Check:
    """Who won each race: a person, or the policy."""
    check = Check(RACE)
    winners: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    for outcome in outcomes:
        for request in outcome.state.approvals.values() if outcome.state else []:
            decision = request.decision
            if request.status == "expired":
                winners["expired"] += 1
            elif decision is not None and decision.by_policy:
                winners["policy"] += 1
            else:
                winners["person"] += 1
        answers.update(
            "accepted" if a.accepted else ("refused" if a.accepted is False else "signal")
            for a in outcome.answers
        )
    check.attempts = len(outcomes)
    check.outcome = (
        f"{len(outcomes)} requests: won by {_tally(winners.elements())}; decisions "
        f"{_tally(answers.elements())}"
    )
    return check
