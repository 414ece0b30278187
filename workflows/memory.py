"""What the model is given: the conversation by reference, the messages not sent yet, the
checkpoint committed before a long wait, and the context rebuilt from the ledger after one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio import workflow

from waitstate.schemas import Message, ModelCallInput, ModelResponse, RunInput, RunState
from waitstate.schemas.forks import Recording
from waitstate.schemas.run import CALL_MODEL, CHECKPOINT_PROMPT, Checkpoint
from waitstate.wording import span

from . import ledger
from .activity_calls import Failed, call
from .plan import Plan
from .policies import CHECKPOINT_RETRY, model_call


@dataclass
class Wait:
    """Something the run waits for, shown in the Web UI while it lasts."""

    kind: str
    details: str
    began: datetime
    # What a checkpoint would say the run waits for, and whether one was written before it.
    label: str = ""
    checkpointed: bool = False
    # Handed to the next run by continue-as-new: the wait goes on there.
    parked: bool = False


class Memory:
    """The conversation a run's model sees, and how it survives long waits."""

    def __init__(self, plan: Plan, state: RunState) -> None:
        self._plan = plan
        input = plan.input
        self._state = state
        if input.carry is not None:
            # Continued as new: the conversation goes on where the previous run left it.
            self.transcript_ref = input.carry.transcript_ref
            self.unsent = list(input.carry.unsent)
        elif input.fork is not None and input.fork.recording is not None:
            self.forked(input.fork.recording)
        else:
            self.transcript_ref = None
            # A thread starts idle: its messages come one by one (workflows/thread.py).
            self.unsent = (
                [] if input.thread is not None else [Message(role="user", content=input.task)]
            )
        # Set when a wait outlasted `rebuild_after`: the next model call gets a context rebuilt
        # from the ledger instead of the stale transcript.
        self.long_wait: timedelta | None = None
        # A long wait that had no checkpoint before it: written before the context is rebuilt.
        self._checkpoint_due: str | None = None

    @property
    def _input(self) -> RunInput:
        return self._plan.input

    def forked(self, recording: Recording) -> None:
        """A fork: the conversation the recorded run's model had before its turn `at` + 1."""
        self.transcript_ref = recording.transcript_ref
        self.unsent = list(recording.messages)

    def new_turn(self, transcript_ref: str | None) -> None:
        """The model answered: everything it was sent is in the transcript `transcript_ref`."""
        self.transcript_ref = transcript_ref
        self.unsent = []

    def worth_checkpoint(self, expected: timedelta | None) -> bool:
        """Whether to checkpoint before a wait expected to last `expected` (None: a person,
        however long they take): only before a wait known to be long, so a short poll costs
        no model call; if a wait turns out long, the checkpoint is written before the rebuilt
        context needs it (`rebuild`)."""
        return expected is None or expected > self._input.rebuild_after

    async def before_wait(self, waiting_for: str, expected: timedelta | None) -> bool:
        """Get ready for a wait for `waiting_for` expected to last `expected` (None: nobody
        knows how long): the checkpoint, if the wait may be long. Whether one was written."""
        checkpointed = self.worth_checkpoint(expected)
        if checkpointed:
            await self.checkpoint(waiting_for)
        return checkpointed

    async def checkpoint(self, waiting_for: str) -> None:
        """Commit what is done and what remains: written by the model in one call, or built
        from the ledger (the call failed)."""
        checkpoint = self._ledger_checkpoint(waiting_for)
        checkpoint = await self._model_checkpoint(waiting_for) or checkpoint
        self._state.checkpoint = checkpoint

    def waited(self, wait: Wait, waited: timedelta) -> None:
        """A wait ended after `waited`: past `rebuild_after`, the transcript is left behind."""
        if waited > self._input.rebuild_after:
            self.long_wait = max(self.long_wait or waited, waited)
            if not wait.checkpointed:
                self._checkpoint_due = wait.label
        else:
            ledger.step(
                self._state, "event", "context", f"transcript kept after waiting {span(waited)}"
            )

    async def rebuild(self, event: str) -> None:
        """Start the model afresh from the ledger (see `ledger.rebuilt_context`)."""
        if self._checkpoint_due is not None:
            due, self._checkpoint_due = self._checkpoint_due, None
            await self.checkpoint(due)
        waited, self.long_wait = self.long_wait, None
        text = ledger.rebuilt_context(self._state, event, self._state.checkpoint)
        self.transcript_ref = None
        self.unsent = [Message(role="user", content=text)]
        ledger.context_rebuilt(
            self._state,
            f"rebuilt from the ledger after waiting {span(waited) if waited else 'a while'}",
        )

    async def _model_checkpoint(self, waiting_for: str) -> Checkpoint | None:
        response = await call(
            CALL_MODEL,
            ModelCallInput(
                model=self._input.model,
                system_prompt=CHECKPOINT_PROMPT,
                new_messages=[
                    Message(role="user", content=ledger.checkpoint_prompt(self._state, waiting_for))
                ],
                tools=[],
            ),
            result_type=ModelResponse,
            retry_policy=CHECKPOINT_RETRY,
            summary=f"checkpoint {self._input.model}",
            **model_call(self._input),
        )
        if isinstance(response, Failed):
            return None
        ledger.add_usage(self._state, response.usage)
        written = ledger.parse_checkpoint(response.message.content)
        if written is None:
            return None
        done, remaining = written
        return Checkpoint(
            at=workflow.now(), waiting_for=waiting_for, done=done, remaining=remaining
        )

    def _ledger_checkpoint(self, waiting_for: str) -> Checkpoint:
        pending = [
            f"{op.tool} ({op.operation_id})"
            for op in self._state.operations.values()
            if not op.terminal
        ]
        pending += [f"approval for {r.tool}" for r in self._state.approvals.values() if r.open]
        done, remaining = ledger.ledger_checkpoint(self._state, waiting_for, pending)
        return Checkpoint(
            at=workflow.now(), waiting_for=waiting_for, done=done, remaining=remaining
        )
