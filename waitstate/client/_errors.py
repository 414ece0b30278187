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


class RunUnavailable(TemporalFailed):
    """The run did not take an Update for now: it met the run as it continued as new, and the
    next run did not get it. Nothing was recorded; sent again, it reaches the run."""

    def __init__(self, run_id: str, what: str) -> None:
        super().__init__(
            f"run {run_id} did not take the {what}",
            "it met the run as it continued as new; send it again",
        )
        self.run_id = run_id


class UpdateRefused(ClientError):
    """The run's validator refused an Update (a decision, an answer, a completion: `what`), or
    the run failed it; nothing was recorded.

    `reason` is the first line of the run's message, `detail` all of it; `error_type` is the
    refusal's `ApplicationError` type (`waitstate.schemas.errors`, e.g.
    `QUESTION_INVALID_ANSWER`), for callers that act on it (the gateway says it in HTTP).
    """

    def __init__(
        self,
        run_id: str,
        reason: str,
        error_type: str | None = None,
        *,
        what: str = "update",
        detail: str | None = None,
    ) -> None:
        super().__init__(f"run {run_id} refused the {what}: {reason}")
        self.run_id = run_id
        self.reason = reason
        self.error_type = error_type
        self.what = what
        self.detail = reason if detail is None else detail


class DecisionRefused(UpdateRefused):
    """The run's validator refused a decision (no such request, already decided or expired, a
    link's nonce that is not the request's); nothing was recorded."""

    def __init__(
        self, run_id: str, reason: str, error_type: str | None = None, *, detail: str | None = None
    ) -> None:
        super().__init__(run_id, reason, error_type, what="decision", detail=detail)


class AnswerRefused(UpdateRefused):
    """The run's validator refused an answer (no such question, already closed, the model's to
    answer, content that does not match its schema); nothing was recorded."""

    def __init__(
        self, run_id: str, reason: str, error_type: str | None = None, *, detail: str | None = None
    ) -> None:
        super().__init__(run_id, reason, error_type, what="answer", detail=detail)


class CompletionRefused(UpdateRefused):
    """The run's validator refused an operation's completion (no such operation, a token's
    nonce that is not the operation's, already resolved, a report that changes nothing);
    nothing was recorded."""

    def __init__(
        self, run_id: str, reason: str, error_type: str | None = None, *, detail: str | None = None
    ) -> None:
        super().__init__(run_id, reason, error_type, what="completion", detail=detail)


class AlreadyApplied(ClientError):
    """A copy of a decision or completion (`what`) already applied: it shared the first one's
    Update id, so Temporal answered it with the first one's outcome, which carries the first
    one's delivery id, not this one's. This one applied nothing."""

    def __init__(self, run_id: str, what: str) -> None:
        super().__init__(f"run {run_id} already applied this {what}: this copy applied nothing")
        self.run_id = run_id
        self.what = what


class UpdateNotFound(ClientError):
    """No run of the chain has the Update asked for (`recall`): it never reached one, or a
    validator refused it (refusals leave none)."""

    def __init__(self, run_id: str, update_id: str) -> None:
        super().__init__(f"run {run_id} has no Update {update_id}")
        self.run_id = run_id
        self.update_id = update_id


def first_line(err: BaseException | None) -> str:
    """The first line of an error's message: every error is one line; server and SDK messages
    may span several."""
    if err is None:
        return "unknown error"
    text = err.message if isinstance(err, RPCError | FailureError) else str(err)
    return (text.strip() or type(err).__name__).splitlines()[0]
