"""The rows of issue 11's fault classes (`chaos.exactly_once.rows`) shown failing: each flags
what it checks beyond the invariants, planted in real runs' outcomes (`recorded.py`), and
passes them without the plant. The races row (11) counts who won and checks nothing of its own:
its runs' violations are the invariants' (APPROVALS, FINAL, REFUSED), added by the driver.

In the quick tier, as test_invariants.py is: no server, no process."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from chaos import exactly_once
from chaos.exactly_once import (
    CAN_EVENTS,
    CAN_EXPIRY,
    CAN_WAITING,
    EXPIRY,
    PROGRESS_BEFORE,
    RACE,
    ROTATION,
    Rotation,
)
from chaos.history import cancel_attempts
from chaos.model import Check
from chaos.runs import RunOutcome
from tests.chaos_checks.recorded import load, stats

CALLBACK_AWAIT = EXPIRY[("callback", "await")]
POLL_AWAIT = EXPIRY[("poll", "await")]
# The recorded runs of issue 11's classes.
ISSUE_11 = ["early-export", "expiry-callback-await", "expiry-poll-await", "can-export", "race"]


def row(
    name: str,
    outcomes: list[RunOutcome],
    found: dict[str, Any] | None = None,
    rotation: Rotation | None = None,
) -> Check:
    """The row `name`, as the driver makes it from these outcomes."""
    checks = exactly_once.rows(outcomes, stats() if found is None else found, rotation)
    [check] = [c for c in checks if c.name == name]
    return check


def tag(outcome: RunOutcome) -> str:
    return f"{outcome.plan.id} ({outcome.plan.kind})"


def test_the_recorded_runs_of_the_classes_break_no_row() -> None:
    outcomes = [load(name) for name in ISSUE_11]

    checks = exactly_once.rows(outcomes, stats(), None)

    assert {c.name: c.violations for c in checks if c.violations} == {}
    counted = {c.name for c in checks if c.attempts}
    assert {PROGRESS_BEFORE, CALLBACK_AWAIT, POLL_AWAIT, CAN_WAITING, RACE} <= counted


def test_progress_flags_a_class_whose_reports_never_beat_the_start() -> None:
    early = load("early-export")  # its systems held the start's answer past the job
    assert row(PROGRESS_BEFORE, [early]).violations == []
    assert early.state is not None and early.plan.queue == "early"

    # The plain export's reports all came after its start returned: as the class's run, the
    # race it is about was not run.
    plain = load("export")
    plain.plan.klass = PROGRESS_BEFORE

    assert row(PROGRESS_BEFORE, [plain]).violations == [
        "no report reached a run before its start returned (not exercised)"
    ]
    assert plain.notes == ["no report reached the run before its start returned"]


def test_expiry_flags_a_job_not_told_to_stop_or_told_more_often_than_the_run_tried() -> None:
    outcome, found = load("expiry-poll-await"), stats()
    assert row(POLL_AWAIT, [outcome], found).violations == []
    assert outcome.state is not None
    [op] = outcome.state.operations.values()
    key = f"{outcome.plan.id}/{op.tool_call_id}"
    tried = cancel_attempts(outcome.chain)[op.operation_id]
    assert (found["keys"][key]["cancels"], tried) == (1, 1)

    found["keys"][key]["cancels"] = 0
    found["jobs"][op.job_id]["status"] = "running"
    assert row(POLL_AWAIT, [outcome], found).violations == [
        f"{tag(outcome)}: expired operation {op.operation_id}'s job got 0 cancels "
        "(1 cancel attempts in the run's histories)",
        f"{tag(outcome)}: expired operation {op.operation_id}'s job still running",
    ]
    found["keys"][key]["cancels"] = 2  # one attempt, two cancels: one came from elsewhere
    found["jobs"][op.job_id]["status"] = "cancelled"
    assert row(POLL_AWAIT, [outcome], found).violations == [
        f"{tag(outcome)}: expired operation {op.operation_id}'s job got 2 cancels "
        "(1 cancel attempts in the run's histories)"
    ]


def test_expiry_flags_a_late_completion_accepted() -> None:
    outcome = load("expiry-callback-await")
    assert row(CALLBACK_AWAIT, [outcome]).violations == []
    late = next(a for a in outcome.answers if a.via == "late")
    assert (late.status, late.accepted) == (410, False)

    outcome.answers[outcome.answers.index(late)] = replace(
        late, status=200, code="200", accepted=True
    )

    assert row(CALLBACK_AWAIT, [outcome]).violations == [
        f"{late.subject}: a late completion (late) answered 200 200"
    ]


def test_continued_flags_a_chain_the_state_does_not_count_or_that_never_continued() -> None:
    outcome = load("can-export")
    assert row(CAN_WAITING, [outcome]).violations == []
    assert outcome.state is not None
    runs = len(outcome.chain)
    assert outcome.state.continued_as_new == runs - 1 > 0

    outcome.state.continued_as_new -= 1
    assert row(CAN_WAITING, [outcome]).violations == [
        f"{tag(outcome)}: the state says {runs - 2} continues, the histories show {runs} runs"
    ]
    once = load("export")  # a run of one history, as the class's
    once.plan.klass = CAN_WAITING
    assert row(CAN_WAITING, [once]).violations == [
        f"{tag(once)}: never continued as new (limit {CAN_EVENTS} events)"
    ]


def test_continued_right_after_an_expiry_flags_a_class_that_never_did() -> None:
    outcome = load("can-export")  # it continued while waiting, never right after an expiry
    outcome.plan.klass = CAN_EXPIRY

    assert row(CAN_EXPIRY, [outcome]).violations == [
        "no run continued as new right after an expiry (not exercised)"
    ]


def _rotation_run() -> RunOutcome:
    """The person-decided approval run as a rotation run: decided once, by its link (the
    rotation's plans send no duplicate)."""
    outcome = load("ask-link")
    outcome.plan.klass, outcome.plan.rotation = ROTATION, "before"
    outcome.answers = [a for a in outcome.answers if a.via == "link"]
    return outcome


def test_rotation_flags_a_rotation_that_did_not_happen_or_a_link_refused() -> None:
    outcome = _rotation_run()
    rotated = Rotation(happened=True, seconds=3.2, workers=4)
    assert row(ROTATION, [outcome], rotation=rotated).violations == []

    failed = Rotation(note="RuntimeError: worker not ready after 90s")
    assert row(ROTATION, [outcome], rotation=failed).violations == [
        "the signing key was not rotated: RuntimeError: worker not ready after 90s"
    ]
    [link] = outcome.answers
    outcome.answers = [replace(link, status=401, code="invalid_token", accepted=False)]
    assert row(ROTATION, [outcome], rotation=rotated).violations == [
        f"{outcome.plan.id}: its link answered 401 invalid_token"
    ]
