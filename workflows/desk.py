"""The desk of requests to people, one model for both kinds: an approval is a question whose
answer is fixed (approve or reject). `Desk` is what the approval desk and the question desk
are alike, and this module the wait they share.

A request opens a window with a timer; its recipients are told by notices with a signed link,
each sent beside the window; a policy that escalates opens a second window, to a second
recipient, once the first passed; and whatever is still open when the last window passes gets
the policy's outcome. What stays a desk's own is its policy: what a reply is (a decision, an
answer that fits a schema), what a timeout does, and how it tells people (`Notifying`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from waitstate.schemas import RunState
from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest
from waitstate.schemas.operations import Operation
from waitstate.schemas.questions import PersonNotice, QuestionPolicy, QuestionRequest

from . import ledger
from .activity_calls import Failed, call
from .board import StatusBoard
from .parts import Part
from .policies import NOTIFY_RETRY, NOTIFY_TIMEOUT

# A request a person is asked to close: an approval, or a job's question.
Request = ApprovalRequest | QuestionRequest
R = TypeVar("R", ApprovalRequest, QuestionRequest)


# The shortest wait an armed window takes once its deadline has passed.
MOMENT = timedelta(milliseconds=1)


class Wakes(Protocol):
    """What may end a window's wait early, the request still open (see `ApprovalAsides`)."""

    def wanted(self) -> bool:
        """Whether it wants the wait to end now."""
        ...


async def window(
    request: Request,
    *,
    op: Operation | None = None,
    mirror: bool = False,
    wake: Wakes | None = None,
) -> bool:
    """Wait, holding no worker, for the request to close by its deadline (not at all once the
    deadline has passed, but for a moment), or for `op` (the job that asked) to end; whether it
    closed. `wake`: its wish ends the wait too, the request still open (its caller answers a
    thread's message, then waits on). `mirror`: wait as if the request were still open (an
    approval decided as its window ended, see `ApprovalDesk._mirrors_escalation`).

    An open request's timer is started even when its deadline has passed (for a moment), so
    what the run issues does not depend on the activation's time. A worker that applies a
    timer's firing to answer a query does so at the query's time, which no workflow task of
    the history has; a replay applies it at the next task's, later."""
    remaining = max(request.expires_at - workflow.now(), MOMENT)
    if (request.open or mirror) and remaining > timedelta(0):
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: (
                    not request.open
                    or (op is not None and op.terminal)
                    or (wake is not None and wake.wanted())
                ),
                timeout=remaining,
                timeout_summary=expiry_summary(request) if request.open else None,
            )
    return not request.open


def new_nonce() -> str:
    """A fresh nonce for a token or a link, chosen by the run: 96 random bits, as 16 base64url
    characters (the run keeps only its hash, `ledger.nonce_hash`)."""
    return base64.urlsafe_b64encode(workflow.uuid4().bytes[:12]).decode("ascii")


def expiry_summary(request: Request) -> str:
    """What a request's window timer is called in the run's history (its summary: metadata,
    which replay does not compare), by which a reader of the run's events tells that the
    window passed with the request still open (`approval.expired`, `question.expired`): a
    request closed in time cancels its timer, so only an open one's fires."""
    return f"{request.noun} {request.ref} expires"


def escalate(state: RunState, request: Request, name: str) -> None:
    """Open the request's second window, for its policy's `escalate_to`: to the deadline the
    links were minted with (the first window's links stay valid meanwhile)."""
    policy = request.policy
    request.escalated = True
    request.expires_at = request.expires_at + policy.timeout
    request.sent_to.append(policy.escalate_to)
    ledger.step(state, "event", request.tool, f"{name} escalated to {policy.escalate_to}")


def links_expiry(opened: datetime, policy: ApprovalPolicy | QuestionPolicy) -> datetime:
    """When a request's links stop working: at the end of its last window."""
    windows = 2 if policy.on_timeout == "escalate" else 1
    return opened + policy.timeout * windows


@dataclass(frozen=True)
class Notice:
    """One notice to send: the activity that sends it, with what, and what its sending changes.

    `told`: the list the recipient is added to once told (a question's, so that a run continued
    as new tells only whoever was not told). `show_when_done`: show the board once the notice
    was sent or given up on (an escalation's new deadline, for approvals that show it then).
    """

    activity: str
    argument: PersonNotice[Any]
    result_type: type[Any]
    summary: str
    timeout: timedelta
    told: list[str] | None = None
    show_when_done: bool = False


@dataclass(frozen=True)
class Notifying:
    """How a desk tells people of its requests: the activity, its input's model and result's
    type, and what the activity's summary calls a request of the tool (`approval for`)."""

    activity: str
    notice: type[PersonNotice[Any]]
    result_type: type[Any]
    about: str


async def notify(notice: Notice) -> Any:
    """Send `notice`: the activity's result, or `Failed` (logged: the wait goes on without it).

    Raises:
        ActivityError: the notice was cancelled.
    """
    recipient = notice.argument.recipient
    sent = await call(
        notice.activity,
        notice.argument,
        result_type=notice.result_type,
        summary=notice.summary,
        start_to_close_timeout=notice.timeout,
        retry_policy=NOTIFY_RETRY,
    )
    if isinstance(sent, Failed):
        workflow.logger.warning("could not notify %s: %s", recipient, sent.reason)
    elif notice.told is not None:
        notice.told.append(recipient)
    return sent


class Notices:
    """The notices of one wait, each sent in a task of its own while the window runs (a notice
    that is slow or retried, because a worker crashed, never delays the window nor keeps a
    decision from being final), and all cancelled as the block ends: the request is closed, no
    one needs telling any more."""

    def __init__(self, board: StatusBoard) -> None:
        self._board = board
        self._sending: list[asyncio.Task[None]] = []

    def __enter__(self) -> Notices:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sending in self._sending:
            sending.cancel()

    def send(self, notice: Notice) -> None:
        self._sending.append(asyncio.create_task(self._send(notice)))

    async def _send(self, notice: Notice) -> None:
        try:
            await notify(notice)
        except ActivityError as err:
            if not is_cancelled_exception(err):
                raise
            return  # cancelled because the request closed: nothing is lost
        if notice.show_when_done:
            self._board.show()


@dataclass(frozen=True)
class Refusals:
    """The error types of a desk's refusals of a reply (see `Desk._reply_to`)."""

    unknown: str
    mismatch: str
    closed: str


class Desk(Part, Generic[R]):
    """A desk of requests to people, of one kind (approvals, questions): what every desk does
    alike, over one model (`PersonRequest`), and the one wait they share (`_waiting` and
    `_windows`, over `window`, `escalate` and `Notices`). A desk keeps only its policy: what a
    reply is (a decision, or an answer that fits a schema), what may end a window early
    (`_window`) and what a timeout does.

    Attributes:
        called: What a refusal calls a request (`approval request`, `question`).
        refusals: The error types of its refusals of a reply.
        notifying: How it tells people of a request.
        shows_escalation_once_told: How an escalation's new deadline is shown. True (approvals):
            once the escalation's notice was sent or given up on, and with no notice when the
            second window has passed already (see `ApprovalDesk._mirrors_escalation`); False
            (questions): at once, the notice sent whatever the deadline. Each desk's recorded
            histories replay only their own way.
    """

    called: ClassVar[str]
    refusals: ClassVar[Refusals]
    notifying: ClassVar[Notifying]
    shows_escalation_once_told: ClassVar[bool]

    def _requests(self) -> Mapping[str, R]:
        """The run's requests of this desk, by id."""
        raise NotImplementedError

    def _link_nonce(self, request: R) -> str | None:
        """The nonce the run chose for the request's links (None: the activity chooses it)."""
        raise NotImplementedError

    def _told(self, request: R) -> list[str] | None:
        """The list of whom the request's notices were sent, kept by the run (None: not kept)."""
        return None

    def _named(self, request: R) -> str:
        """What the run's ledger calls the request."""
        raise NotImplementedError

    async def _window(self, request: R, *, mirror: bool = False) -> bool:
        """`window` for the request, with what may end it early at this desk; whether the
        request closed (`mirror`: see `window`)."""
        raise NotImplementedError

    def _mirrors_escalation(self, request: R) -> bool:
        """Whether the request, closed as its first window ended, escalates in form only (see
        `ApprovalDesk._mirrors_escalation`)."""
        return False

    def _also_refuse(self, request: R) -> None:
        """A desk's own check of a reply, before the request's being open (see `_reply_to`)."""

    def _reply_to(self, ref: str, nonce: str | None) -> R:
        """The open request `ref` a person's reply (a decision, an answer) is to, checked as a
        validator checks it (nothing is written to the run's history).

        Raises:
            ApplicationError: no such request (`refusals.unknown`), a link's nonce that is not
                its links' (`refusals.mismatch`), the desk's own check (`_also_refuse`), a
                request no longer open (`refusals.closed`).
        """
        request = self._requests().get(ref)
        if request is None:
            raise ApplicationError(f"no {self.called} {ref}", type=self.refusals.unknown)
        this = self.called.rpartition(" ")[2]
        if nonce is not None and request.nonce_hash != ledger.nonce_hash(nonce):
            raise ApplicationError(
                f"link was not issued for this {this}", type=self.refusals.mismatch
            )
        self._also_refuse(request)
        if not request.open:
            raise ApplicationError(f"{this} already {request.status}", type=self.refusals.closed)
        return request

    def _notice(
        self, request: R, recipient: str, *, escalation: bool, show_when_done: bool = False
    ) -> Notice:
        """The notice that tells `recipient` of `request`, with links that work until its last
        window ends."""
        notifying = self.notifying
        argument = notifying.notice(
            workflow_id=workflow.info().workflow_id,
            request=request,
            recipient=recipient,
            escalation=escalation,
            nonce=self._link_nonce(request),
            links_expire_at=links_expiry(request.opened_at, request.policy),
        )
        return Notice(
            activity=notifying.activity,
            argument=argument,
            result_type=notifying.result_type,
            summary=f"notify {recipient}: {notifying.about} {request.tool}",
            timeout=NOTIFY_TIMEOUT,
            told=self._told(request),
            show_when_done=show_when_done,
        )

    # --- the wait ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _waiting(self, request: R, kind: str, details: str, label: str) -> Iterator[Notices]:
        """While the block runs, the run shows that it waits for the request, and whoever it is
        sent to and was not told yet (by a run before this one, continued as new) is told;
        its notices are cancelled as the block ends (the request closed, or timed out)."""
        with (
            self._board.waiting(kind, details, label, until=request.expires_at),
            Notices(self._board) as notices,
        ):
            first, told = request.sent_to[0], self._told(request) or []
            for recipient in [r for r in request.sent_to if r not in told]:
                notices.send(self._notice(request, recipient, escalation=recipient != first))
            yield notices

    async def _windows(self, request: R, notices: Notices) -> bool:
        """Wait for the request to close through its windows: the first, then, if its policy
        escalates and it has not yet, a second, its recipient told (by `notices`). Whether it
        closed; if not, nothing was awaited since a window found it open, and the caller
        applies the desk's timeout outcome."""
        closed = await self._window(request)
        mirror = closed and self._mirrors_escalation(request)
        if closed and not mirror:
            return True
        policy = request.policy
        if policy.on_timeout != "escalate" or request.escalated:
            return False
        escalate(self._state, request, self._named(request))
        if not self.shows_escalation_once_told:
            notices.send(self._notice(request, policy.escalate_to, escalation=True))
            self._board.show()
        elif request.expires_at > workflow.now():
            # Shown once the escalation is sent, not at once: a decision that reaches a worker
            # in the same task as the window's timer may be seen before or after it (the SDK
            # orders the two one way for a worker that rebuilds the run, and the other way on
            # replay), and the escalation must leave nothing in history unless it outlived
            # that task.
            notices.send(
                self._notice(request, policy.escalate_to, escalation=True, show_when_done=True)
            )
        else:
            self._board.show()
        return await self._window(request, mirror=mirror)
