"""What the CLI says when a door's outcome is unknown (the run did not answer in time): one line,
with the key or the arguments that make sending it again safe; and when nothing was recorded,
that it was not. Against a client that answers as the real one does in those cases (the cases
themselves are met end to end in tests/gateway/test_retried_doors.py)."""

from __future__ import annotations

from typing import Any

import pytest

from waitstate.cli import people, threads
from waitstate.cli.output import CliError
from waitstate.client import NotAnswered, OutcomeUnknown, WaitstateClient, thread_input
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.questions import AnswerInput
from waitstate.schemas.threads import SendMessage


class Unanswering:
    """A client whose every send raises `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def send_message(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    async def decide(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    async def answer(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


def _client(error: Exception) -> WaitstateClient:
    stand_in: Any = Unanswering(error)
    return stand_in


async def test_a_message_whose_outcome_is_unknown_names_its_key_and_thread() -> None:
    unknown = OutcomeUnknown("thread-1", "no answer within 30 s", "key-abc")
    with pytest.raises(CliError) as said:
        await threads._send(
            _client(unknown), "thread-1", SendMessage(text="hi"), thread_input(model="x")
        )

    line = str(said.value)
    assert "\n" not in line
    assert "--thread thread-1 --key key-abc" in line
    assert "taken once" in line


async def test_a_message_taken_for_now_by_none_says_nothing_was_recorded() -> None:
    busy = NotAnswered("thread-1", "busy for 30 s")
    with pytest.raises(CliError) as said:
        await threads._send(
            _client(busy), "thread-1", SendMessage(text="hi"), thread_input(model="x")
        )

    assert "nothing was recorded" in str(said.value) and "--key" not in str(said.value)


async def test_a_decision_or_answer_whose_outcome_is_unknown_says_how_to_send_it_again() -> None:
    unknown = OutcomeUnknown("run-1", "no answer within 20 s", "client/decide/apr_1/x")
    decision = DecideInput(request_id="apr_1", decision="approve", reviewer="ana")
    answer = AnswerInput(question_id="q_1", action="decline")
    with pytest.raises(CliError) as decided:
        await people.decide(_client(unknown), "run-1", decision)
    with pytest.raises(CliError) as answered:
        await people._answer(_client(unknown), "run-1", answer)

    for said, option in ((decided, "--request apr_1"), (answered, "--question q_1")):
        line = str(said.value)
        assert "\n" not in line
        assert f"run the same command again with {option}" in line
        assert "applied once" in line
