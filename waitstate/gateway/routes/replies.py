"""What the routes of a person's reply share: a decision on an approval request and an answer to
a question, each sent through the token of its link.

A route declares its `Reply` (its body, what it replies to, and how refusals, logs and counts
name it) and keeps only what differs: its path and documentation, its own checks, and what it
answers. No router here: the routes stay in `approvals` and `questions`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from fastapi import APIRouter, Request
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel

from waitstate.auth.tokens import ResumeClaims
from waitstate.gateway.gate import Acceptance, Admitted, Gate, json_body
from waitstate.gateway.refusals import Refused, error_responses

_Body = TypeVar("_Body", bound=BaseModel)
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])


class _RunVerdict(Protocol):
    @property
    def accepted(self) -> bool: ...
    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str: ...


_Verdict = TypeVar("_Verdict", bound=_RunVerdict)


@dataclass(frozen=True)
class Reply(Generic[_Body]):
    """A family of replies a person sends through a link.

    Attributes:
        model: The body's model.
        kind: What a reply is to (`request`, `question`), as refusals name it: a token for
            another one is `wrong_<kind>`, and one no longer open is "the <kind> is <status>".
        endpoint: What a reply is (`decision`, `answer`): the label of the count of the
            replies the runs took, and in `invalid_<endpoint>`, the code of a refusal of a JSON
            body that is not a valid `model`.
        delivering: How the log of a failed delivery names one reply, formatted with the id
            of what it replies to (`"a decision on request {!r}"`).
    """

    model: type[_Body]
    kind: str
    endpoint: str
    delivering: str

    @property
    def invalid_code(self) -> str:
        """The code of a refusal of a JSON body that is not a valid `model`."""
        return f"invalid_{self.endpoint}"

    def route(
        self,
        router: APIRouter,
        path: str,
        *,
        accepted: type[Acceptance],
        response_description: str,
        errors: Mapping[int, str],
        operation_id: str,
        summary: str,
        description: str,
    ) -> Callable[[_Endpoint], _Endpoint]:
        """`router.post` for the reply's route, documented with the body `admit` reads (FastAPI
        does not read it) and the route's own refusals beside every route's."""
        return router.post(
            path,
            response_model=accepted,
            response_description=response_description,
            responses=error_responses(errors),
            operation_id=operation_id,
            summary=summary,
            description=description,
            openapi_extra=json_body(self.model),
        )

    async def admit(
        self,
        gate: Gate,
        request: Request,
        credentials: HTTPAuthorizationCredentials | None,
        subject: str | frozenset[str],
    ) -> Admitted[_Body]:
        """The request's reply, once it passed the gate's checks with a token for `subject`
        (or one of them)."""
        return await gate.admit(
            request,
            credentials,
            subject=subject,
            kind=self.kind,
            model=self.model,
            invalid_code=self.invalid_code,
        )

    async def apply(
        self,
        gate: Gate,
        send: Callable[[ResumeClaims, str, _Body], Awaitable[_Verdict]],
        reply_to: str,
        admitted: Admitted[_Body],
    ) -> _Verdict:
        """The run's outcome of the `admitted` reply to `reply_to`, delivered with `send` (the
        deliverer's method for such replies).

        Raises:
            Refused: the run refused it or could not be reached (see `Gate.deliver`), or 409
                `not_accepted`: the run recorded it without applying it, as what it replies
                to was no longer open, so retrying cannot help.
            Failed: the deliverer failed (a bug).
        """
        delivery = send(admitted.claims, reply_to, admitted.body)
        outcome = await gate.deliver(delivery, self.delivering.format(reply_to))
        if not outcome.accepted:
            message = outcome.reason or f"the {self.kind} is {outcome.status}"
            raise Refused(409, "not_accepted", message)
        return outcome

    def delivered(self, gate: Gate, message: str, *args: object) -> None:
        """Log a reply the run took (`message % args`) and count it."""
        gate.delivered(self.endpoint, message, *args)
