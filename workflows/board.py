"""What a run shows of itself while it runs: its status, what it waits for (the Web UI's current
details and the search attributes the list view filters on), and its metrics."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

from waitstate.schemas import RunState, RunStatus
from waitstate.schemas.approvals import ApprovalRequest
from waitstate.schemas.questions import QuestionRequest

from . import ledger, versions
from .memory import Memory, Wait
from .search_attributes import (
    AGENT_STATUS,
    PENDING_OPERATIONS,
    WAIT_EXPIRES_AT,
    WAITING_FOR,
)

# What a run shows it waits for when several things are open at once:
# a person's answer or decision before a system's report, since someone must act (it is what
# `starter.py pending` and the Web UI's WaitingFor="input" filter look for).
PRECEDENCE = ("input", "approval", "webhook", "poll", "agents")
SYSTEM_KINDS = frozenset({"webhook", "poll"})


class StatusBoard:
    """Keeps `RunState.status`, the search attributes and the Web UI's details in step with
    what the run does. It only shows: what to do before a wait (a checkpoint) is the caller's
    (`Memory.before_wait`)."""

    def __init__(self, state: RunState, memory: Memory) -> None:
        self._state = state
        self._memory = memory
        self._waits: list[Wait] = []

    def set_status(self, status: RunStatus) -> None:
        self._state.status = status
        if self._quiet() and status == "running":
            return  # a thread at work shows what it shows idle (see `_shown`)
        # AgentStatus filters the Web UI's list; skip the upsert (a history event) when the
        # value is already set.
        if workflow.info().typed_search_attributes.get(AGENT_STATUS) != status:
            workflow.upsert_search_attributes([AGENT_STATUS.value_set(status)])

    def end(self, status: RunStatus, revision: int) -> None:
        """The run's last status. From revision `COMPLETED_UNMARKED` on, a run that completes
        leaves the `AgentStatus` it showed: Temporal's ExecutionStatus says it completed
        (`waitstate.client.run_status` reads both), and the upsert would be its history's one
        event more than a plain workflow's. The endings only the run can tell are shown."""
        if status == "completed" and revision >= versions.COMPLETED_UNMARKED:
            self._state.status = status
            return
        self.set_status(status)

    @contextlib.contextmanager
    def waiting(
        self,
        kind: str,
        details: str,
        label: str,
        *,
        until: datetime | None = None,
        began: datetime | None = None,
        checkpointed: bool = True,
    ) -> Iterator[Wait]:
        """While the block runs, the run is `waiting` for `kind` (approval, webhook, poll); the
        Web UI shows `details`. Of nested and concurrent waits, the run shows the first by
        `PRECEDENCE` (see `show`). `began` is when a wait
        taken over from the previous run (continue-as-new) began."""
        if until is not None:
            details = f"{details} (expires {until.strftime('%Y-%m-%d %H:%M UTC')})"
        wait = Wait(kind, details, began or workflow.now(), label, checkpointed)
        self._waits.append(wait)
        self.show()
        try:
            yield wait
        except GeneratorExit:
            # Evicted from the worker's cache: the coroutine is closed, not resumed, and the
            # workflow APIs are gone. The next worker rebuilds this state from history.
            raise
        except BaseException:
            self._end(wait)
            raise
        else:
            self._end(wait)

    def show(self) -> None:
        """Bring status, search attributes and the Web UI's details up to date."""
        kind, details = self._waiting_for()
        status: RunStatus = "waiting" if self._waits else "running"
        self._state.status = status  # AgentStatus with the other attributes, in one upsert
        pending = [op for op in self._state.operations.values() if not op.terminal]
        # The earliest deadline of anything the run waits on: past it, the wait is overdue.
        deadlines = [op.expires_at for op in pending]
        waits: list[ApprovalRequest | QuestionRequest] = [
            r for r in self._state.approvals.values() if r.open
        ]
        waits += [q for q in self._state.questions.values() if q.open]
        deadlines += [self._deadline(wait) for wait in waits]
        expires = min(deadlines) if self._waits and deadlines else None
        current = workflow.info().typed_search_attributes
        updates: list[SearchAttributeUpdate[Any]] = []
        shown_status, kind = self._shown(status, kind)
        if current.get(AGENT_STATUS) != shown_status:
            updates.append(AGENT_STATUS.value_set(shown_status))
        if current.get(WAITING_FOR) != kind:
            updates.append(WAITING_FOR.value_set(kind))
        if current.get(PENDING_OPERATIONS) != len(pending):
            updates.append(PENDING_OPERATIONS.value_set(len(pending)))
        # Left as it was when no wait is on: it means something only while WaitingFor is not
        # "none" (and unsetting a Datetime confuses the time-skipping test server's decoder).
        if expires is not None and current.get(WAIT_EXPIRES_AT) != expires:
            updates.append(WAIT_EXPIRES_AT.value_set(expires))
        if updates:
            workflow.upsert_search_attributes(updates)
        workflow.set_current_details(details)

    def _quiet(self) -> bool:
        """Whether the run is a thread (whose turns are quiet, see `_shown`)."""
        return self._state.thread is not None

    def _shown(self, status: RunStatus, kind: str) -> tuple[RunStatus, str]:
        """The AgentStatus and WaitingFor the search attributes show. A
        thread answering a message in a turn that waits for nothing else shows what it shows
        idle, `waiting` for a `message`: a turn takes seconds, and a visibility write per
        message would cost each message more than the rest of its way to the model. What a
        turn waits for besides (an approval, a webhook, a question) is shown as it begins."""
        if self._quiet() and kind in ("none", "message"):
            return "waiting", "message"
        return status, kind

    def _deadline(self, wait: ApprovalRequest | QuestionRequest) -> datetime:
        """When a person's wait ends for good; that of an escalating wait's second window
        from the start: escalating is its policy, not an overdue wait, and so
        escalating (or hearing that the escalation's notice went out) changes no search
        attribute. A command issued as a timer fires or a notice completes could otherwise
        come before or after a decision's Update in the same workflow task, in one order live
        and the other on replay (the SDK puts Updates first in an activation)."""
        if wait.policy.on_timeout == "escalate" and not wait.escalated:
            return wait.expires_at + wait.policy.timeout
        return wait.expires_at

    def _waiting_for(self) -> tuple[str, str]:
        """What the run waits for (`none` while it works) and the Web UI's details of it.

        Derived from what is open, whatever order things opened in: a person's question (not
        one the model answers) or an approval outranks a system's report, and an operation
        wait is a webhook's while any pending operation completes by callback.
        """
        if not self._waits:
            outage = self._state.store_outage
            if outage is None:
                return "none", ""
            # Not a wait for anyone: the run works on as soon as the store is back.
            return "none", (
                f"blob store unavailable since {outage.since.strftime('%H:%M:%S UTC')}: "
                f"{outage.error}; {outage.call} tried again at "
                f"{outage.next_try_at.strftime('%H:%M:%S UTC')}"
            )
        latest = self._waits[-1]
        kinds = {wait.kind for wait in self._waits}
        if any(q.open and q.policy.answered_by == "person" for q in self._state.questions.values()):
            kinds.add("input")
        if any(request.open for request in self._state.approvals.values()):
            kinds.add("approval")
        pending = [op for op in self._state.operations.values() if not op.terminal]
        if kinds & SYSTEM_KINDS and pending:
            kinds = (kinds - SYSTEM_KINDS) | {ledger.wait_kind(pending)}
        kind = next((k for k in PRECEDENCE if k in kinds), latest.kind)
        # Its own wait's details; a kind derived from an open item before its wait began (the
        # same activation) shows the latest wait's until then.
        shown = next((wait for wait in reversed(self._waits) if wait.kind == kind), latest)
        return kind, shown.details

    def _end(self, wait: Wait) -> None:
        self._waits.remove(wait)
        self.show()
        if not wait.parked:  # else it goes on in the next run, measured from `began`
            self._memory.waited(wait, workflow.now() - wait.began)
