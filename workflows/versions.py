"""Which behaviours a run has, by the version of the workflow it was started on.

A change of behaviour that live runs may replay goes behind `workflow.patched`: runs recorded
before it keep the earlier behaviour, so their histories replay; runs started after it get the
new one. Each flag is read once, when the run's workflow object is built.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass

from temporalio import workflow

# Exactly-once delivery: runs choose their tokens' nonces, hold early reports, never drop a
# cancel they owe, continue as new while they wait, and let a person's decision stand against
# the timeout policy.
EXACTLY_ONCE = "exactly-once-v2"
# Fewer checkpoint calls: a checkpoint only before a wait known to be long (or before the
# context is rebuilt after one), asked of every model alike (the scripted one too).
# (Short: a patch id is recorded in every new run's history, twice.)
CHECKPOINT_POLICY = "agent-run-3"
# Questions mid-flight: operations' jobs may ask questions (a poll returns when one is asked),
# answered by a person or the model, with a timer and an on-timeout outcome.
MID_FLIGHT_INPUT = "agent-run-4"
# Hostile or failing outsiders: a job's question is checked when asked (a schema that cannot
# be answered is refused to the job); a callback operation is reconciled by its status; a
# question for the model ends a wait for operations; what the run waits for is derived from
# what is open; a cancel that failed is told as such; an answer that never validated ends the
# run `output_invalid`; a blob store outage is waited out, not charged to the model's retries.
HARDENED = "agent-run-5"
# Handlers after resolutions: an Update's or a signal's handler runs after whatever else the
# same activation resolved (an activity, a timer), as it did when the two came in activations
# of their own, so a worker that rebuilds the run and a replay see what the live run saw
# (waitstate/activation_order.py, docs/reliability.md).
HANDLERS_LAST = "agent-run-6"
# Steering during an approval wait: a thread's message that comes while a tool call waits
# for a person's decision is answered at once, in a model call of its own, and the wait goes
# on (workflows/asides.py); before, it waited for the decision.
STEER_APPROVALS = "agent-run-7"
# Quiet turns: a thread's search attributes stay as they are while it answers a message in a
# turn that waits for nothing else (it shows `waiting` for a `message`, idle or answering), and
# a run changes AgentStatus with its other attributes in one upsert: no visibility write per
# message, whose cost was most of what a message waited for beyond the floor (figure 6).
QUIET_TURNS = "agent-run-8"
# Every marker, oldest first: a run of one has its behaviour and every earlier one's.
MARKERS = (
    EXACTLY_ONCE,
    CHECKPOINT_POLICY,
    MID_FLIGHT_INPUT,
    HARDENED,
    HANDLERS_LAST,
    STEER_APPROVALS,
    QUIET_TURNS,
)
# The markers whose runs the worker's runner gives handlers after resolutions: this one and
# every newer one (a run records only its newest).
HANDLERS_LAST_MARKERS = frozenset({HANDLERS_LAST, STEER_APPROVALS, QUIET_TURNS})


@dataclass(frozen=True)
class Versions:
    """The behaviours of one run."""

    exactly_once: bool
    checkpoint_policy: bool
    mid_flight_input: bool = False
    hardened: bool = False
    handlers_last: bool = False
    steer_approvals: bool = False
    quiet_turns: bool = False

    @classmethod
    def of_this_run(cls) -> Versions:
        """Read the run's patch markers; a new run records only the newest (each marker costs
        its history an event and a search-attribute upsert), which implies every earlier one."""
        if workflow.patched(QUIET_TURNS):
            return cls.through(QUIET_TURNS)
        if workflow.patched(STEER_APPROVALS):
            return cls.through(STEER_APPROVALS)
        if workflow.patched(HANDLERS_LAST):
            return cls.through(HANDLERS_LAST)
        if workflow.patched(HARDENED):
            return cls.through(HARDENED)
        if workflow.patched(MID_FLIGHT_INPUT):
            return cls.through(MID_FLIGHT_INPUT)
        if workflow.patched(CHECKPOINT_POLICY):
            return cls.through(CHECKPOINT_POLICY)
        return cls(exactly_once=workflow.patched(EXACTLY_ONCE), checkpoint_policy=False)

    @classmethod
    def through(cls, marker: str) -> Versions:
        """The behaviours of a run of `marker`: its own and every earlier marker's (the flags
        are in the order of `MARKERS`)."""
        newest = MARKERS.index(marker)
        names = [field.name for field in dataclasses.fields(cls)]
        return cls(**{name: index <= newest for index, name in enumerate(names)})

    def nonce(self) -> str:
        """A fresh nonce for a token or a link (runs from EXACTLY_ONCE on choose their own):
        96 random bits, as 16 base64url characters (32 hex ones before CHECKPOINT_POLICY)."""
        value = workflow.uuid4()
        if not self.checkpoint_policy:
            return value.hex
        return base64.urlsafe_b64encode(value.bytes[:12]).decode("ascii")
