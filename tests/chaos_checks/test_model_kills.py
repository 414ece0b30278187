"""Fault class 19's check (`chaos.model_kills`) shown failing: the recorded outcomes of a plain
run and a thread whose calls were held at the model while their workers were SIGKILLed
(`recorded_kills.py`) pass it; a violation planted in a copy of either is flagged: a call taken
over past its heartbeat timeout, or scheduled with none (as before model calls heartbeated), a
message answered twice or never, the model asked once too often, a run that did not complete
or whose call was never killed.

In the quick tier, as test_invariants.py is: no server, no process."""

from __future__ import annotations

from temporalio.api.history.v1 import HistoryEvent

from chaos.history import ACTIVITY_SCHEDULED, ACTIVITY_STARTED
from chaos.model_kills import ROW, rows, violations
from chaos.runs import RunOutcome
from tests.chaos_checks.recorded_kills import load_kill
from waitstate.schemas import Step

PLAIN = "model-kill"
THREAD = "model-kill-thread"


def _killed_call(outcome: RunOutcome) -> tuple[HistoryEvent, HistoryEvent]:
    """The killed call's scheduled and (last attempt's) started events, in the recorded chain."""
    [kill] = outcome.facts["killed"]
    events = [e for events in outcome.chain for e in events]
    scheduled = next(
        e
        for e in events
        if e.event_type == ACTIVITY_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_id == kill["activity"]
    )
    started = next(
        e
        for e in events
        if e.event_type == ACTIVITY_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled.event_id
    )
    return scheduled, started


def test_the_recorded_runs_pass_and_their_row_counts_them() -> None:
    outcomes = [load_kill(PLAIN), load_kill(THREAD)]
    took: list[float] = []

    found = {o.plan.id: violations(o, took) for o in outcomes}
    [row] = rows(outcomes)

    assert found == {o.plan.id: [] for o in outcomes}
    assert row.name == ROW and row.ok and row.attempts == 2
    assert len(took) == 2 and all(0 < seconds < 30 for seconds in took)
    assert "2 messages" in row.outcome and "2 calls held" in row.outcome


def test_a_call_taken_over_past_its_heartbeat_timeout_is_flagged() -> None:
    outcome = load_kill(PLAIN)
    _, started = _killed_call(outcome)
    # Its next attempt as code without heartbeats starts it: once the start-to-close passed.
    started.event_time.FromSeconds(started.event_time.seconds + 105)
    [kill] = outcome.facts["killed"]

    [problem] = violations(outcome)

    assert problem.startswith(f"{outcome.plan.id} (model-kill): call {kill['activity']} of run ")
    assert "after the kill, past its heartbeat timeout of 15 s" in problem


def test_a_call_scheduled_with_no_heartbeat_timeout_is_flagged() -> None:
    outcome = load_kill(THREAD)
    scheduled, _ = _killed_call(outcome)
    scheduled.activity_task_scheduled_event_attributes.ClearField("heartbeat_timeout")

    found = violations(outcome)

    assert any(p.endswith("scheduled with no heartbeat timeout") for p in found), found
    # With none, nothing but a kill's moment and the retry's second bound the takeover.
    assert any("past its heartbeat timeout of 0 s" in p for p in found), found


def test_a_message_answered_twice_or_never_is_flagged() -> None:
    twice = load_kill(THREAD)
    assert twice.state is not None
    [reply] = [s for s in twice.state.steps if s.name == "reply" and s.detail == "m1 replied"]
    twice.state.steps.append(Step.model_validate(reply.model_dump()))
    never = load_kill(THREAD)
    assert never.state is not None and never.state.thread is not None
    never.state.thread.messages[1].status = "queued"

    assert violations(twice) == [
        f"{twice.plan.id} (model-kill-thread): message m1 replied to twice"
    ]
    assert violations(never) == [
        f"{never.plan.id} (model-kill-thread): message m2 queued, not replied"
    ]


def test_the_model_asked_once_too_often_is_flagged() -> None:
    outcome = load_kill(PLAIN)
    outcome.facts["asked"] += 1

    assert violations(outcome) == [
        f"{outcome.plan.id} (model-kill): the model was asked 4 times for 2 turns and 1 calls "
        "killed (each turn once, and each killed call once more)"
    ]


def test_a_run_that_did_not_complete_or_was_never_killed_is_flagged() -> None:
    failed = load_kill(PLAIN)
    failed.status = "failed"
    spared = load_kill(PLAIN)
    spared.facts["killed"] = []
    spared.facts["asked"] -= 1

    assert violations(failed) == [f"{failed.plan.id} (model-kill): ended failed, not completed"]
    assert violations(spared) == [f"{spared.plan.id} (model-kill): no call of it was killed"]
    assert not rows([failed, spared])[0].ok
