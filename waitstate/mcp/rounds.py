"""Rounds of input on a plain MCP `tools/call` (multi round-trip requests, SEP-2322, protocol
2026-07-28), client side: a server may answer a call with `resultType: "input_required"`, its
`inputRequests` (key -> an elicitation, a roots request, a sampling request) and an opaque
`requestState`; the client answers every request and sends the same call again with
`inputResponses` and the `requestState` echoed unchanged, round after round, until the server
answers with a result (or runs the call as a task).

Such a call becomes an operation whose job is `mrtr:<id>`: the `call_tool` activity records the
call and the server's first round here, and the operation's poll (`McpTaskBackend`) asks the
round's questions, sends the call again once every one is answered, and records each answer.
Everything lives in the worker's blob store as records (`BlobStore.put_record`), each written
once, so any worker, after any restart, finds where the call stands:

    mrtr/<id>/call              the call: server, tool, arguments, whether it may be repeated
    mrtr/<id>/reply/<n>         what the server answered send n (send 0: the model's call)
    mrtr/<id>/answer/<n>/<key>  the answer to request `key` of reply n (the first one stands)
    mrtr/<id>/sending/<n>       send n is being made (whoever wrote it makes it)

Reply n's requests are round n + 1's questions, keyed `<round>/<the server's key>` so that a
server's key asked again in a later round is a new question. Imported only by workers.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

from waitstate.blobs import BlobStore
from waitstate.schemas.operations import OperationError
from waitstate.schemas.questions import Question
from waitstate.tools.spec import ToolError

JOB_PREFIX = "mrtr:"
RECORDS = "mrtr"
# A call asks for input this many rounds at most; one more is refused (the call fails).
MAX_ROUNDS = 16
# What a round may hold to be kept: its requestState (characters), its input requests (how
# many, and their JSON), so a hostile server cannot fill the store or the run's questions.
MAX_REQUEST_STATE_CHARS = 65_536
MAX_INPUT_REQUESTS = 32
MAX_INPUT_REQUESTS_BYTES = 65_536
ROOTS_LIST = "roots/list"
ELICITATION = "elicitation/create"

ReplyKind = Literal["input_required", "result", "task", "failed"]


class PendingCall(BaseModel):
    """The call whose rounds these are, as the `call_tool` activity made it."""

    server: str
    tool: str = Field(description="The server's own name of the tool.")
    name: str = Field(description="The tool as the model calls it (`SERVER__TOOL`).")
    arguments: dict[str, Any]
    repeatable: bool = Field(
        description="Read-only or idempotent: a send that may or may not have reached the "
        "server is made again; any other is not (its outcome is then unknown)."
    )
    header_params: bool = Field(
        default=False,
        description="Some arguments travel in `Mcp-Param-*` headers too: the session lists "
        "the tools before each send, so the SDK sends them.",
    )


class Reply(BaseModel):
    """What the server answered one send of the call: another round, the result, a task, or
    the failure that ends the call."""

    kind: ReplyKind
    request_state: str | None = None
    input_requests: dict[str, dict[str, Any]] | None = None
    result: dict[str, Any] | None = None
    task_id: str | None = None
    poll_interval_ms: int | None = None
    error: OperationError | None = None


class RoundAnswer(BaseModel):
    """The answer to one input request of a round (an `inputResponses` entry)."""

    key: str
    response: dict[str, Any]


def is_rounds_job(job_id: str) -> bool:
    """Whether an MCP operation's job is a plain call's rounds (else a task's id)."""
    return job_id.startswith(JOB_PREFIX)


def question_key(round_number: int, key: str) -> str:
    """The key a round's request is asked under: its round, then the server's key."""
    return f"{round_number}/{key}"


def split_question_key(key: str) -> tuple[int, str] | None:
    """A question key's round and the server's key, or None for a key not of a round."""
    head, slash, rest = key.partition("/")
    if not slash or not head.isdigit() or len(head) > 3:
        return None
    return int(head), rest


def failed(code: str, message: str) -> Reply:
    """A reply that ends the call with `code` (the operation fails, not to be retried)."""
    return Reply(
        kind="failed", error=OperationError(code=code, message=message[:2000], retryable=False)
    )


def unknown_outcome_message(name: str, why: str) -> str:
    """What the model is told of a call that may or may not have taken effect."""
    return (
        f"the call to {name} may or may not have taken effect ({why}); it is not repeated on "
        "its own. Check before calling it again."
    )


def input_required_reply(result: Any, sends: int, server: str, tool: str) -> Reply:
    """The reply of an `InputRequiredResult` the server answered send `sends` with: the next
    round, or, past the bounds (rounds, sizes), the failure that ends the call."""
    round_number = sends + 1
    if round_number > MAX_ROUNDS:
        return failed(
            "too_many_rounds",
            f"MCP server {server!r} asked for input on {tool} a {round_number}th time (at most "
            f"{MAX_ROUNDS} rounds are answered): the call was given up, not sent again",
        )
    state = result.request_state
    if state is not None and len(state) > MAX_REQUEST_STATE_CHARS:
        return failed(
            "input_required_too_large",
            f"MCP server {server!r} asked for input on {tool} with a requestState of "
            f"{len(state):,} characters (at most {MAX_REQUEST_STATE_CHARS:,} are kept): the "
            "call was given up",
        )
    requests = {
        str(key): request.model_dump(by_alias=True, mode="json", exclude_none=True)
        for key, request in (result.input_requests or {}).items()
    }
    size = len(json.dumps(requests))
    if len(requests) > MAX_INPUT_REQUESTS or size > MAX_INPUT_REQUESTS_BYTES:
        return failed(
            "input_required_too_large",
            f"MCP server {server!r} asked for input on {tool} with {len(requests)} input "
            f"requests, {size:,} bytes of JSON (at most {MAX_INPUT_REQUESTS} and "
            f"{MAX_INPUT_REQUESTS_BYTES:,} are kept): the call was given up",
        )
    return Reply(kind="input_required", request_state=state, input_requests=requests)


def round_questions(round_number: int, questions: list[Question]) -> list[Question]:
    """A round's open questions, under their round's keys (`question_key`)."""
    return [q.model_copy(update={"key": question_key(round_number, q.key)}) for q in questions]


class Rounds:
    """One pending call's records in the blob store (see the module's docstring)."""

    def __init__(self, blobs: BlobStore, job_id: str) -> None:
        if not is_rounds_job(job_id):
            raise ToolError(f"{job_id!r} is not a call's rounds")
        self.job_id = job_id
        self._blobs = blobs
        self._base = f"{RECORDS}/{job_id.removeprefix(JOB_PREFIX)}"
        self._latest = 0  # no reply before this one exists (replies are never removed)

    @classmethod
    async def begin(cls, blobs: BlobStore, call: PendingCall, first: Reply) -> Rounds:
        """Record a call the server answered with its first round: its new job.

        Raises:
            BlobStoreUnavailable: the store could not be written.
        """
        rounds = cls(blobs, f"{JOB_PREFIX}{uuid.uuid4().hex}")
        await blobs.put_record(f"{rounds._base}/call", call.model_dump_json().encode())
        await blobs.put_record(f"{rounds._base}/reply/0", first.model_dump_json().encode())
        return rounds

    async def call(self) -> PendingCall:
        """The call.

        Raises:
            ToolError: the store holds no such call (another store, or a made-up id).
        """
        stored = await self._blobs.get_record(f"{self._base}/call")
        if stored is None:
            raise ToolError(
                f"no pending MCP call {self.job_id} in this worker's blob store (workers must "
                "share one)"
            )
        return PendingCall.model_validate_json(stored)

    async def reply(self, n: int) -> Reply | None:
        """The server's reply to send `n`, if it came."""
        stored = await self._blobs.get_record(f"{self._base}/reply/{n}")
        return None if stored is None else Reply.model_validate_json(stored)

    async def latest(self) -> tuple[int, Reply]:
        """The last reply that came, and which send it answered.

        Raises:
            ToolError: not even the first reply is recorded.
        """
        found: tuple[int, Reply] | None = None
        n = self._latest
        while n <= MAX_ROUNDS + 1 and (reply := await self.reply(n)) is not None:
            found = (n, reply)
            n += 1
        if found is None:
            raise ToolError(f"no reply recorded for the pending MCP call {self.job_id}")
        self._latest = found[0]
        return found

    async def record_reply(self, n: int, reply: Reply) -> Reply:
        """Record the reply to send `n`; the one that stands (another may have come first)."""
        if not await self._blobs.put_record(
            f"{self._base}/reply/{n}", reply.model_dump_json().encode()
        ):
            stored = await self.reply(n)
            assert stored is not None
            return stored
        return reply

    async def answers(self, n: int, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The answers recorded so far to reply `n`'s requests `keys`, by key."""
        found = {}
        for key in keys:
            stored = await self._blobs.get_record(self._answer_name(n, key))
            if stored is not None:
                found[key] = RoundAnswer.model_validate_json(stored).response
        return found

    async def record_answer(self, n: int, key: str, response: dict[str, Any]) -> bool:
        """Record the answer to reply `n`'s request `key`; False if it had one (which stands)."""
        answer = RoundAnswer(key=key, response=response)
        return await self._blobs.put_record(
            self._answer_name(n, key), answer.model_dump_json().encode()
        )

    async def claim_send(self, n: int) -> bool:
        """Claim send `n` (the answers to reply n - 1): True for the one caller that may make
        it; False when it was claimed before (it may have been made)."""
        return await self._blobs.put_record(f"{self._base}/sending/{n}", b"sending")

    def _answer_name(self, n: int, key: str) -> str:
        # The server's keys are any strings: named by their hash (the record holds the key).
        return f"{self._base}/answer/{n}/{hashlib.sha256(key.encode()).hexdigest()[:32]}"
