"""A2A push notifications, sent by the run itself: at each change of its task's state (working;
input-required, with what it asks; completed, failed or canceled) the run schedules one
`post_push` activity per push configuration, so a push is part of the run's history and is sent
after a SIGKILL of any process, once per state. Nothing of this runs for a run without push
configurations (every run recorded before them): no task, no command, no event.

The run never waits on a client's webhook, but at its end: a final state's pushes are waited
for (at most `FINAL_WAIT`) before the run returns, or it would end before they are sent.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from waitstate.schemas import RunState
from waitstate.schemas.approvals import ApprovalRequest
from waitstate.schemas.errors import PUSH_CONFIG_REFUSED, PUSH_REFUSED
from waitstate.schemas.pushes import (
    MAX_PUSH_CONFIGS,
    POST_PUSH,
    PostPush,
    PushConfig,
    PushConfigChange,
    PushConfigs,
    PushedState,
    PushState,
    TaskSnapshot,
    open_requests,
)
from waitstate.schemas.questions import QuestionRequest

from .activity_calls import Failed, call
from .plan import Plan

PUSH_ATTEMPT = timedelta(seconds=10)
# A receiver down for longer than this misses the push (it can read the task with GetTask).
PUSH_GIVE_UP = timedelta(minutes=10)
PUSH_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    non_retryable_error_types=[PUSH_REFUSED],
)
# How long a run that ended waits for its last pushes before it returns.
FINAL_WAIT = timedelta(seconds=30)


def _ended(status: str) -> PushedState:
    """How a run's end is told: every end but an answer or a cancel is a failed task."""
    if status == "completed":
        return "completed"
    return "canceled" if status == "cancelled" else "failed"


def _asking(state: RunState) -> ApprovalRequest | QuestionRequest | None:
    """The oldest request the run asks its caller."""
    asks = open_requests(state)
    return asks[0] if asks else None


def key_of(state: RunState) -> tuple[str, str | None]:
    """What tells one state of the task from the next (`TaskSnapshot.key`), read cheaply: the
    run looks at it after each of its activations."""
    if state.status not in ("running", "waiting"):
        return _ended(state.status), None
    asked = _asking(state)
    if asked is None:
        return "working", None
    return "input-required", _request_id(asked)


def _request_id(request: ApprovalRequest | QuestionRequest) -> str:
    return request.request_id if isinstance(request, ApprovalRequest) else request.question_id


def task_state(state: RunState, at_seq: int) -> TaskSnapshot:
    """The run as its A2A task stands (`waitstate/a2a/shapes.py` says the same of a run read
    from outside): ended, asking its caller (the oldest open approval, or question a person
    answers), or working."""
    now = workflow.now()
    if state.status not in ("running", "waiting"):
        ended = _ended(state.status)
        answer = state.final_output if ended == "completed" else None
        return TaskSnapshot(
            seq=at_seq,
            state=ended,
            at=now,
            status=state.status,
            agent=state.agent,
            answer=answer,
            error=state.error,
        )
    oldest = _asking(state)
    if oldest is not None:
        return TaskSnapshot(
            seq=at_seq,
            state="input-required",
            at=now,
            asked=oldest,
            status=state.status,
            agent=state.agent,
        )
    return TaskSnapshot(seq=at_seq, state="working", at=now, status=state.status, agent=state.agent)


class Pushes:
    """The run's push configurations (`RunState.push`, which it alone writes) and the pushes
    it sends."""

    def __init__(self, plan: Plan, state: RunState) -> None:
        self._state = state
        if state.push is None and plan.input.push and plan.input.thread is None:
            state.push = PushState(configs=list(plan.input.push))  # pushes are task runs' only
        self._sending: list[asyncio.Task[None]] = []
        self._watching: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Watch the task's state, if anyone wants it pushed; a push a previous run (before it
        continued as new) had not ended is sent again."""
        push = self._state.push
        if self._watching is not None or push is None or not push.configs:
            return
        if push.last is not None:
            for config in push.configs:
                if push.sent.get(config.id, 0) < push.last.seq:
                    self._send(config, push.last)
        self._watching = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            await workflow.wait_condition(self._changed)
            self.notice()

    def _changed(self) -> bool:
        push = self._state.push
        if push is None or push.last is None:
            return True
        return key_of(self._state) != push.last.key()

    def notice(self) -> None:
        """Push the task's state to every configuration, if it changed since the last push."""
        push = self._state.push
        if push is None or not push.configs:
            return
        seq = push.last.seq + 1 if push.last is not None else 1
        now = task_state(self._state, seq)
        if push.last is not None and now.key() == push.last.key():
            return
        push.last = now
        for config in push.configs:
            self._send(config, now)

    def _send(self, config: PushConfig, task: TaskSnapshot) -> None:
        self._sending.append(asyncio.create_task(self._post(config, task)))

    async def _post(self, config: PushConfig, task: TaskSnapshot) -> None:
        sent = await call(
            POST_PUSH,
            PostPush(config=config, task=task),
            result_type=type(None),
            summary=f"push {task.state} #{task.seq} to {config.id}",
            start_to_close_timeout=PUSH_ATTEMPT,
            schedule_to_close_timeout=PUSH_GIVE_UP,
            retry_policy=PUSH_RETRY,
        )
        if isinstance(sent, Failed):
            workflow.logger.warning("push to %s not sent: %s", config.id, sent.reason)
        push = self._state.push
        if push is not None:
            push.sent[config.id] = max(push.sent.get(config.id, 0), task.seq)

    async def last(self) -> None:
        """The run ended: push its final state, and wait (at most `FINAL_WAIT`) for every push
        still being sent."""
        self.notice()
        self._sending = [sending for sending in self._sending if not sending.done()]
        if not self._sending:
            return
        try:
            await workflow.wait_condition(
                lambda: all(sending.done() for sending in self._sending), timeout=FINAL_WAIT
            )
        except TimeoutError:
            workflow.logger.warning("the run ends with pushes unsent after %s", FINAL_WAIT)

    # --- the push_config Update --------------------------------------------------------------

    def validate(self, change: PushConfigChange) -> None:
        """Refuse a change the task cannot take (nothing is recorded)."""
        if self._state.thread is not None:
            raise ApplicationError(
                "pushes are for task runs, not a conversation's messages",
                type=PUSH_CONFIG_REFUSED,
                non_retryable=True,
            )
        if (change.config is None) == (change.delete is None):
            raise ApplicationError(
                "a change sets a config or deletes one", type=PUSH_CONFIG_REFUSED
            )
        configs = self._state.push.configs if self._state.push is not None else []
        config = change.config
        if (
            config is not None
            and all(c.id != config.id for c in configs)
            and len(configs) >= MAX_PUSH_CONFIGS
        ):
            raise ApplicationError(
                f"a task has at most {MAX_PUSH_CONFIGS} push configs",
                type=PUSH_CONFIG_REFUSED,
                non_retryable=True,
            )

    def change(self, change: PushConfigChange) -> PushConfigs:
        """Set or delete a configuration; a new one is told the task's state at once."""
        self.validate(change)  # again: another change may have been applied since its validator
        push = self._state.push
        if push is None:
            push = self._state.push = PushState()
        if change.delete is not None:
            push.configs = [c for c in push.configs if c.id != change.delete]
        elif change.config is not None:
            config = change.config
            known = any(c.id == config.id for c in push.configs)
            push.configs = [c for c in push.configs if c.id != config.id] + [config]
            if push.last is not None and not known:
                self._send(config, push.last)
            self.start()
        return PushConfigs(configs=push.configs)
