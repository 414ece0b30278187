"""What the client's calls fail with: `ClientError`s, each with a one-line message."""

from __future__ import annotations

from temporalio.exceptions import FailureError
from temporalio.service import RPCError


class ClientError(Exception):
    """A call the client could not complete; its message is one line."""


class Unreachable(ClientError):
    """Temporal could not be reached."""


class TemporalFailed(ClientError):
    """Temporal answered with an error of no kind below (permission denied, overload...)."""

    def __init__(self, doing: str, reason: str) -> None:
        super().__init__(f"{doing}: {reason}")
        self.reason = reason


class CleanupFailed(ClientError):
    """The blob cleanup ran and failed; the message is its reason."""


class RunNotFound(ClientError):
    """No run has this id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id}")
        self.run_id = run_id


class RunEnded(ClientError):
    """The run has ended, so it can no longer take what was sent."""

    def __init__(self, run_id: str, status: str | None = None) -> None:
        how = f" ({status})" if status else ""
        super().__init__(f"run {run_id} has already ended{how}")
        self.run_id = run_id
        self.status = status


class StartFailed(ClientError):
    """The run was not started: Temporal refused it, or its input names a model it could never
    call."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"could not start run {run_id}: {reason}")
        self.run_id = run_id
        self.reason = reason


class NotAnswered(ClientError):
    """The run did not answer a query or an Update in time: is a worker running?"""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"run {run_id} did not answer ({reason}): is a worker running?")
        self.run_id = run_id
        self.reason = reason


class OutcomeUnknown(NotAnswered):
    """The run did not answer in time, after Temporal may have taken what was sent: Temporal
    holds an Update it has admitted until a worker takes it, so it may yet be applied (or,
    should the server lose it first, never). Not a refusal: send it again with `key`, and the
    retry is answered with what became of it, never applied a second time.

    `key` is the idempotency key the call was sent with: the caller's, or the one the client
    chose for it (a thread message's `key`; a decision's or an answer's `update_id`).
    """

    def __init__(self, run_id: str, reason: str, key: str) -> None:
        ClientError.__init__(
            self,
            f"run {run_id} did not answer ({reason}), so whether it took what was sent is not "
            f"known; it may take it once a worker runs: send it again with key {key}, which it "
            "takes once",
        )
        self.run_id = run_id
        self.reason = reason
        self.key = key


class DecisionRefused(ClientError):
    """The run's validator refused a decision (no such request, already decided or expired);
    nothing was recorded."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"run {run_id} refused the decision: {reason}")
        self.run_id = run_id
        self.reason = reason


class AnswerRefused(ClientError):
    """The run's validator refused an answer (no such question, already closed, the model's to
    answer, content that does not match its schema); nothing was recorded.

    `error_type` is the refusal's `ApplicationError` type (`waitstate.schemas.errors`, e.g.
    `QUESTION_INVALID_ANSWER`), for callers that act on it.
    """

    def __init__(self, run_id: str, reason: str, error_type: str | None = None) -> None:
        super().__init__(f"run {run_id} refused the answer: {reason}")
        self.run_id = run_id
        self.reason = reason
        self.error_type = error_type


def first_line(err: BaseException | None) -> str:
    """The first line of an error's message: every error is one line; server and SDK messages
    may span several."""
    if err is None:
        return "unknown error"
    text = err.message if isinstance(err, RPCError | FailureError) else str(err)
    return (text.strip() or type(err).__name__).splitlines()[0]
