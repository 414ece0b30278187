"""Class 20's check (`chaos.mcp_doors.check`) shown failing: what a run of the class sees (its
calls, each key's answers, and what is there after: the caller's runs, their export jobs, each
thread's messages) passes clean, and each duplicate or lost call planted in it is flagged.

In the quick tier, as test_invariants.py is: no server, no process."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from chaos.mcp_doors import AGENT, CALLER, FAULTS, Call, Found, check
from waitstate.mcp_server import shapes


def seen() -> tuple[list[Call], Found]:
    """A clean run of the class: one key per way, for a task run and for a thread message,
    each answered twice with its own task; one completed run with one export job per task
    key, one message per thread."""
    calls: list[Call] = []
    found = Found({}, {}, {})
    for fault in FAULTS:
        run_key, message_key = f"run-{fault}", f"msg-{fault}"
        task_id = shapes.keyed_task_id(CALLER, run_key)
        calls.append(Call(run_key, fault, answers=[task_id, task_id]))
        run_id = shapes.run_id_of(CALLER, task_id)
        found.runs[run_id] = "completed"
        found.jobs[run_id] = 1
        thread = f"t-{message_key}"
        message = shapes.message_task_id(AGENT, thread, "m1")
        calls.append(Call(message_key, fault, thread=thread, answers=[message, message]))
        found.messages[shapes.thread_run_id(CALLER, AGENT, thread)] = 1
    return calls, found


def test_a_clean_run_of_the_class_passes() -> None:
    calls, found = seen()

    assert check(calls, found) == []


def _second_run(calls: list[Call], found: Found) -> None:
    found.runs[shapes.run_id_of(CALLER, shapes.new_task_id())] = "completed"


def _second_job(calls: list[Call], found: Found) -> None:
    found.jobs[next(iter(found.jobs))] = 2


def _stray_job(calls: list[Call], found: Found) -> None:
    found.jobs[shapes.run_id_of(CALLER, shapes.new_task_id())] = 1


def _second_message(calls: list[Call], found: Found) -> None:
    found.messages[next(iter(found.messages))] = 2


def _other_task(calls: list[Call], found: Found) -> None:
    calls[0].answers[1] = shapes.new_task_id()


def _no_run(calls: list[Call], found: Found) -> None:
    del found.runs[next(iter(found.runs))]


def _no_message(calls: list[Call], found: Found) -> None:
    found.messages[next(iter(found.messages))] = 0


def _never_answered(calls: list[Call], found: Found) -> None:
    calls[1].answers.clear()


def _refused(calls: list[Call], found: Found) -> None:
    calls[2].refused.append("this idempotency key was sent before with another call")


def _not_ended(calls: list[Call], found: Found) -> None:
    found.runs[next(iter(found.runs))] = "running"


@pytest.mark.parametrize(
    ("plant", "flagged"),
    [
        (_second_run, "duplicate: run"),
        (_second_job, "2 export jobs"),
        (_stray_job, "of no key, started 1 jobs"),
        (_second_message, "duplicate: 2 messages"),
        (_other_task, "duplicate: answered with tasks"),
        (_no_run, "lost: no run"),
        (_no_message, "lost: no message"),
        (_never_answered, "lost: never answered"),
        (_refused, "refused: this idempotency key"),
        (_not_ended, "its run ended running"),
    ],
)
def test_a_duplicate_or_a_lost_call_planted_is_flagged(
    plant: Callable[[list[Call], Found], None], flagged: str
) -> None:
    calls, found = seen()
    calls, found = copy.deepcopy(calls), copy.deepcopy(found)

    plant(calls, found)
    problems = check(calls, found)

    assert len(problems) == 1, problems
    assert flagged in problems[0], problems
