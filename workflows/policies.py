"""The timeouts and retry policies of every activity the workflows call, each named once.

An activity's options are recorded in the history of the run that scheduled it: a value
changed here changes what new runs record, so a change of behaviour goes behind
`workflow.patched` like any other (see `workflows/versions.py`). A timeout alone needs none:
replay does not compare them (docs/versions.md). What a run's input sets (the
model's and the tools' `start_to_close`, an operation's poll interval) is not here.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import TypedDict

from temporalio.common import Priority, RetryPolicy

from waitstate.schemas.errors import BLOB_STORE_UNAVAILABLE, OPERATION_STILL_RUNNING
from waitstate.schemas.run import RunInput

from .activity_calls import RUN_QUEUE, CallOptions, Placement

# --- the model -------------------------------------------------------------------------------

# Provider SDKs never retry on their own (max_retries=0): this policy owns every attempt.
# A provider's retry-after reaches it as the ApplicationError's next_retry_delay. What cannot
# succeed on a retry (a refused request, a bad model spec) the activity raises non-retryable.
# A blob store outage is no failure of the model's: runs wait it out without
# spending these attempts (workflows/outages.py).
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=8,
)


class ModelCallOptions(TypedDict):
    """The options every model call of a run is scheduled with (its turns, checkpoints,
    asides), but its retry policy."""

    start_to_close_timeout: timedelta
    heartbeat_timeout: timedelta
    placement: Placement


def model_call(input: RunInput) -> ModelCallOptions:
    """The run's model calls' options: its `model_timeout`, `MODEL_HEARTBEAT`, its placement."""
    return ModelCallOptions(
        start_to_close_timeout=input.model_timeout,
        heartbeat_timeout=MODEL_HEARTBEAT,
        placement=model_placement(input),
    )


def model_placement(input: RunInput) -> Placement:
    """Where a run's model calls go (its turns, checkpoints, asides): the model queue its input
    names, weighed there by its tenant as the fairness key. A run whose input names neither
    calls the model as runs always did, on its own queue with no priority of its own, so
    their histories replay unchanged."""
    if input.model_task_queue is None and input.tenant is None:
        return RUN_QUEUE
    priority = Priority(fairness_key=input.tenant) if input.tenant else Priority.default
    return Placement(task_queue=input.model_task_queue, priority=priority)


# A model call heartbeats (`activities.pulse`: by its stream's chunks, else from a side task
# every third of this), so a worker lost mid-call is noticed within this, not the call's
# start-to-close (the run's `model_timeout`, two minutes by default): the call is tried again a
# second later (MODEL_RETRY) on any worker there is, and a thread's queued messages wait that
# much, not minutes. 15 s plus that second leaves half of the 30 s in which a thread's message is
# answered after its worker's loss to the retried call itself. Shorter would cost the server
# more for little: it takes one heartbeat RPC per 80% of this (the SDK merges the rest), ~5-8 ms
# of CPU each (DESIGN.md), for every call running past a third of it (shorter calls send none):
# about 0.5 ms a second per long call at 15 s. Temporal does not compare an activity's timeouts
# on replay: histories recorded without one replay with it, and need no patch (docs/versions.md).
MODEL_HEARTBEAT = timedelta(seconds=15)

# A checkpoint is worth a second try, not more: the ledger's own is written if the model fails.
CHECKPOINT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)

# A background response (a model spec's `?background`) is checked a second after its create,
# then at an interval doubling up to BACKGROUND_MAX_POLL, inside one heartbeating activity (its
# heartbeat timeout: `poll_heartbeat` of the longest interval). The whole wait is bounded by the
# run's `model_timeout` (its schedule-to-close), past which the response is cancelled; until
# then a wait that failed (its worker gone, the blob store out) is taken over after a second.
BACKGROUND_FIRST_POLL = timedelta(seconds=1)
BACKGROUND_MAX_POLL = timedelta(seconds=10)
BACKGROUND_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=BACKGROUND_MAX_POLL
)

# --- what a run starts with ------------------------------------------------------------------

# The agent's definition, as the worker has it: an agent it does not have fails the run at once.
# A node's reservation from its root's budget: an Update the root answers at once, unless it
# asks a person to raise the budget; retried (the same Update, applied once) while the root's
# worker is away, for as long as it takes: no call of the tree starts unreserved. It heartbeats
# while it waits: an attempt whose worker was killed is tried again within seconds, not at the
# end of its two minutes (chaos row 24 found a tree stalled so).
TREE_BUDGET_CALL = CallOptions(
    start_to_close_timeout=timedelta(minutes=2),
    heartbeat_timeout=timedelta(seconds=10),
    retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
)
# A reading of a run's histories, to fork or score it: bounded, retried a while.
HISTORY_CALL = CallOptions(
    start_to_close_timeout=timedelta(minutes=2),
    retry_policy=RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=10)),
)
AGENT_TIMEOUT = timedelta(seconds=30)
AGENT_RETRY = RetryPolicy(maximum_attempts=3)
# The agent's definition at a run's start, and a sub-agent's long answer kept at its end.
AGENT_CALL = CallOptions(start_to_close_timeout=AGENT_TIMEOUT, retry_policy=AGENT_RETRY)
# The MCP tools a run was granted, listed once; it heartbeats as a tool call does.
MCP_LISTING_TIMEOUT = timedelta(seconds=60)
MCP_LISTING_RETRY = RetryPolicy(maximum_attempts=5)

# --- tools and their jobs --------------------------------------------------------------------

# A sync tool that keeps failing is reported to the model, which can try something else.
# A long tool's start is safe to retry: it carries an idempotency key.
TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=3,
)
# A tool call (a sync tool may take minutes, an MCP server's answer too; a long tool's start
# is quick) heartbeats as a model call does, and for the same reasons: a worker lost under it is
# noticed within this, not the run's `tool_timeout`. A tool that blocks the worker's event loop
# longer than two thirds of it stops the heartbeats and is taken for lost (activities/tools.py).
TOOL_HEARTBEAT = timedelta(seconds=15)
# Asking an external system to stop a job: worth insisting, but not forever.
CANCEL_TIMEOUT = timedelta(seconds=30)
CANCEL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
# Polls of a minute or more are one check per attempt, the retry policy being the poller, so
# no worker slot is held in between (`long_poll_retry`); shorter ones loop inside one
# heartbeating activity (`poll_heartbeat`, `poll_retry`).
POLL_CHECK_TIMEOUT = timedelta(seconds=30)
POLL_RETRY_FIRST = timedelta(seconds=1)
# A callback job's status, checked in case its webhook was lost: each check is an attempt of one
# activity (its retry policy is the checker), so a check that finds the job running adds nothing
# to the run's history. Never more often than this.
RECONCILE_MIN = timedelta(seconds=1)
# One such check is one status request: a worker lost in the middle of it is noticed within
# this, so the next check is not put off by a poll's half minute (a lost webhook then costs a
# worker's crash no more than this).
RECONCILE_CHECK_TIMEOUT = timedelta(seconds=10)
# The check before an operation expires: a few quick attempts (a blip of its system), bounded.
FINAL_CHECK_TIMEOUT = timedelta(seconds=60)
FINAL_CHECK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_attempts=3,
    non_retryable_error_types=[OPERATION_STILL_RUNNING],
)


def long_poll_retry(interval: timedelta) -> RetryPolicy:
    """A poll of a minute or more: every attempt is one check, `interval` apart."""
    return RetryPolicy(
        initial_interval=interval, backoff_coefficient=1.0, maximum_interval=interval
    )


def poll_heartbeat(interval: timedelta) -> timedelta:
    """A crashed worker's poll is taken over once a heartbeat is missed: two intervals plus
    slack, so a slow status call does not trigger a needless takeover."""
    return interval * 2 + timedelta(seconds=5)


def poll_retry(interval: timedelta) -> RetryPolicy:
    """Retries of a crashed poll start after a second; the interval caps the backoff (never
    below the first delay: the server rejects such a policy)."""
    return RetryPolicy(
        initial_interval=POLL_RETRY_FIRST, maximum_interval=max(interval, POLL_RETRY_FIRST)
    )


def reconcile_retry(every: timedelta) -> RetryPolicy:
    """Checks of a callback job's status, one attempt `every` (the job still running is a
    retryable error)."""
    return RetryPolicy(initial_interval=every, backoff_coefficient=1.0, maximum_interval=every)


# --- people ----------------------------------------------------------------------------------

# Telling people of an approval or a question: one HTTP post with a 10 s timeout, so past 12 s
# its worker is gone, and the notice is posted again at once, not after the half minute a short
# window cannot spare. Retried a while; if it still fails, the request stands (the CLI can
# answer it) and the failure is logged.
NOTIFY_TIMEOUT = timedelta(seconds=12)
NOTIFY_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
# An answer goes to the job once: the job keeps the first answer to a key, so a retry after a
# lost reply is safe; a refusal (the job ended, the key is unknown) is final.
DELIVER_TIMEOUT = timedelta(seconds=30)
DELIVER_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)

# --- the blob store --------------------------------------------------------------------------

# The run's own backoff between tries while the store is out: from seconds up to a minute,
# so a run resumes within a minute of the store's return, and an hour's outage costs its
# history some sixty tries.
STORE_RETRY_FIRST = timedelta(seconds=2)
STORE_RETRY_MAX = timedelta(minutes=1)


def leaving_outages(policy: RetryPolicy, spent: int) -> RetryPolicy:
    """`policy`, with the store's failures left to the run and `spent` attempts used up (at
    least one left: the one that met the outage was not spent)."""
    attempts = policy.maximum_attempts
    return dataclasses.replace(
        policy,
        maximum_attempts=max(attempts - spent, 1) if attempts else 0,
        non_retryable_error_types=[
            *(policy.non_retryable_error_types or ()),
            BLOB_STORE_UNAVAILABLE,
        ],
    )


def patient(policy: RetryPolicy) -> RetryPolicy:
    """For a try that only has the store left to do (the model's reply in hand): retried by
    Temporal, at the run's backoff, until the store takes it (a retry adds no history)."""
    return RetryPolicy(
        initial_interval=STORE_RETRY_FIRST,
        backoff_coefficient=2.0,
        maximum_interval=STORE_RETRY_MAX,
        maximum_attempts=0,
        non_retryable_error_types=policy.non_retryable_error_types,
    )


# --- the blob cleanup ------------------------------------------------------------------------

RETENTION_TIMEOUT = timedelta(seconds=30)
# A pass over a large store asks Temporal about each old blob's owners: hours at most. The
# heartbeat (one per blob) tells a dead worker's pass from a long one within a minute.
CLEAN_TIMEOUT = timedelta(hours=6)
CLEAN_HEARTBEAT = timedelta(minutes=1)
# A pass that keeps failing gives way to the next scheduled one.
CLEAN_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(minutes=5))
