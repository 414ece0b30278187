"""The event streams' row (`chaos.streams.check`) shown failing: what a reader got of a real
run's stream through the gateway (`recorded.py`) against what the run's histories say it must
get passes; an event missing, one twice or a reader's own problem is flagged.

In the quick tier, as test_invariants.py is: no server, no process."""

from __future__ import annotations

from dataclasses import replace

from chaos.streams import StreamRead, check, expected
from tests.chaos_checks.recorded import load, recorded


def read_of(name: str) -> tuple[StreamRead, list[tuple[str, str]]]:
    """What the reader of the recorded run `name` got, and what its histories say it must."""
    outcome = load(name)
    assert outcome.streamed is not None, f"{name}'s stream was not read"
    return outcome.streamed, expected(outcome.first_run, outcome.chain)


def streamed() -> list[str]:
    return [name for name in recorded() if load(name).streamed is not None]


def test_every_recorded_stream_is_its_runs_history() -> None:
    reads = [read_of(name) for name in streamed()]

    row = check(reads)

    assert reads and row.violations == [], row.violations
    assert row.attempts == len(reads)


def test_a_stream_that_missed_an_event_or_got_one_twice_is_flagged() -> None:
    read, wanted = read_of("model-429")
    assert check([(read, wanted)]).violations == []
    total = len(wanted)
    [(_, kind)] = [event for event in wanted if event[1] == "tool.started"]
    at = read.kinds.index(kind)

    missed = replace(
        read, ids=read.ids[:at] + read.ids[at + 1 :], kinds=read.kinds[:at] + read.kinds[at + 1 :]
    )
    twice = replace(read, ids=[*read.ids, read.ids[at]], kinds=[*read.kinds, kind])

    assert check([(missed, wanted)]).violations == [
        f"{read.run_id}: streamed {total - 1} events, history has {total} (1 missing, 0 twice, "
        f"first missing [{wanted[at]}])"
    ]
    assert check([(twice, wanted)]).violations == [
        f"{read.run_id}: streamed {total + 1} events, history has {total} (0 missing, 1 twice, "
        "first missing [])"
    ]


def test_a_readers_problem_is_flagged() -> None:
    read, wanted = read_of("model-500")

    cut = replace(read, problems=["the reader never got the run's last event"])

    assert check([(cut, wanted)]).violations == [
        f"{read.run_id}: the reader never got the run's last event"
    ]
