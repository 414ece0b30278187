"""Tool declarations: a ToolSpec per tool, a registry of them, and how a call is run."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ValidationError

from waitstate.schemas import ToolCall, ToolDefinition, ToolResult
from waitstate.schemas.approvals import ApprovalPolicy
from waitstate.schemas.builtin import BUILTIN_TOOLS
from waitstate.schemas.operations import Completion, CompletionMode, ResultMode
from waitstate.schemas.questions import AnswerAction, QuestionPolicy

ToolKind = Literal["sync", "long", "builtin"]
# A callback job's status is checked this often in case its webhook was lost: a lost webhook
# costs minutes, not the operation's timeout; a job running for days costs a check in minutes.
DEFAULT_RECONCILE_EVERY = timedelta(minutes=5)
MIN_RECONCILE_EVERY = timedelta(seconds=1)
# A handler takes the validated arguments, and the call's `RunContext` when its spec says so.
Handler = Callable[..., Awaitable[Any]]


class ToolError(Exception):
    """A failure the model should read and may correct (bad input, nothing found...)."""


@dataclass(frozen=True)
class StartContext:
    """What a long tool's start needs besides its arguments.

    Attributes:
        idempotency_key: Send it to the external system (e.g. an `Idempotency-Key` header), so
            a retried start returns the job already created instead of creating another.
        operation_id: The run's id for the operation.
        callback_url: For `callback` completion: where the external system POSTs the result.
        callback_token: For `callback` completion: the bearer token it must send. A secret:
            never log it, never return it.
    """

    idempotency_key: str
    operation_id: str
    callback_url: str | None = None
    callback_token: str | None = None


@dataclass(frozen=True)
class Job:
    """An external job a long tool started."""

    job_id: str
    eta_seconds: int | None = None


class LongTool(Protocol):
    """The external system behind a long tool."""

    async def start(self, args: Any, context: StartContext) -> Job:
        """Start the job (idempotently, by `context.idempotency_key`).

        Raises:
            ToolError: the system refused the job for a reason the model should read.
        """
        ...

    async def status(self, job_id: str) -> Completion:
        """The job's current state: what `poll` completion polls, and how a `callback` one is
        checked in case its webhook was lost (`LongSpec.reconcile_every`, and once before it
        would expire).

        Raises:
            ToolError: the system does not know the job (its outcome is then `failed`).
        """
        ...

    async def cancel(self, job_id: str) -> None:
        """Ask the system to stop the job; cancelling a finished job is not an error.

        Raises:
            ToolError: the system refuses to stop the job (final: not retried). Any other
                exception is retried a few times; either way the run tells the model and the
                operator that the job may still run.
        """
        ...


@dataclass(frozen=True)
class JobAnswer:
    """An answer to one of a job's questions, on its way to the job.

    Attributes:
        key: The key the job gave the question.
        action: `accept` (with `content`, valid against the question's schema) or `decline`
            (nobody will answer: a person declined, or the question expired).
        content: The answer.
        responder: Who answered (a person's name, `model`, or `policy`).
        reason: With a decline by `policy`, why the run would not ask the question (its
            schema takes no answer), for the job to report.
    """

    key: str
    action: AnswerAction
    content: dict[str, Any] | None = None
    responder: str = "unknown"
    reason: str | None = None


class AnswersQuestions(Protocol):
    """A long tool whose jobs may ask questions mid-flight (`input_required` with questions)
    implements this besides `LongTool`."""

    async def answer(self, job_id: str, answer: JobAnswer) -> None:
        """Give the job an answer. Answering a question twice must not apply it twice (the
        run may retry a delivery whose outcome it did not hear): keep the first.

        Raises:
            ToolError: the system refused the answer (the job ended, the key is unknown).
        """
        ...


@dataclass(frozen=True)
class LongSpec:
    """How a long tool completes and how long the run waits for it.

    Attributes:
        backend: Starts, checks and cancels jobs.
        completion: `callback` (the system calls the gateway) or `poll` (a heartbeating
            activity checks `backend.status` every `poll_interval`).
        mode: `await`: the model gets the result as the tool's return value when it arrives;
            `handle`: the model gets a handle at once and may do other work meanwhile.
        timeout: After this the job is cancelled and the operation is `expired`.
        poll_interval: Time between status checks (`poll` completion).
        max_in_flight: Pending operations of this tool one run may have at once.
        eta: A hint for the model of how long the job usually takes.
        input: Who answers the questions its jobs ask mid-flight, and what happens when
            nobody does (the backend must implement `AnswersQuestions`).
        reconcile_every: `callback` completion: how often the job's status is checked in case
            its webhook was lost (a sender that gave up, a gateway outage), so a lost webhook
            costs this long, not the timeout. None or zero: no regular checks. Either way the
            status is checked once more before the operation would expire, so a job that
            finished is never expired and sent a cancel. At least a second.
    """

    backend: LongTool
    completion: CompletionMode = "callback"
    mode: ResultMode = "await"
    timeout: timedelta = timedelta(hours=1)
    poll_interval: timedelta = timedelta(seconds=5)
    max_in_flight: int | None = None
    eta: timedelta | None = None
    input: QuestionPolicy | None = None
    reconcile_every: timedelta | None = DEFAULT_RECONCILE_EVERY

    def __post_init__(self) -> None:
        every = self.reconcile_every
        if every is not None and every and every < MIN_RECONCILE_EVERY:
            raise ValueError(
                f"reconcile_every must be at least {MIN_RECONCILE_EVERY.total_seconds():g} s, "
                f"or None or zero for no regular checks; got {every}"
            )

    def reconcile_seconds(self) -> float | None:
        """Seconds between the checks of a `callback` job's status (None: none but the one
        before its expiry)."""
        if self.completion != "callback" or not self.reconcile_every:
            return None
        return self.reconcile_every.total_seconds()


@dataclass(frozen=True)
class ToolSpec:
    """A tool, declared once: what the model sees and what runs.

    Attributes:
        name: The name the model calls it by.
        description: What the model reads to decide when to call it.
        args: Pydantic model of the arguments; its JSON schema is what the model sees.
        handler: Async function taking a validated `args` instance (sync tools), and the
            call's `RunContext` after it when `takes_context` is set (`@tool` sets it).
        long: Set for a long tool: its job completes later, by callback or poll.
        builtin: Answered by the workflow from its own state (no activity).
        requires_approval: True, or a predicate over the validated arguments (e.g. a refund
            over a threshold): the call runs only once a person approved it. Enforced by the
            workflow, whatever the model says.
        approval: Timeout and on-timeout behaviour of those approvals.
        takes_context: The handler takes `(args, context)`, not `(args)`.
        stub: What answers a fork's call of the tool under the `stub` policy, which the
            recording has no result for (docs/forks.md): a function (sync or async) of the
            validated `args` returning the result (text, or anything JSON can write). Never
            called outside a fork.
    """

    name: str
    description: str
    args: type[BaseModel]
    handler: Handler | None = None
    long: LongSpec | None = None
    builtin: bool = False
    requires_approval: bool | Callable[[Any], bool] = False
    approval: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    takes_context: bool = False
    stub: Callable[[Any], Any] | None = None

    def needs_approval(self, args: BaseModel) -> bool:
        """Whether this call, with these arguments, must be approved first."""
        if callable(self.requires_approval):
            return bool(self.requires_approval(args))
        return self.requires_approval

    @property
    def kind(self) -> ToolKind:
        """`sync`, `long` or `builtin`."""
        if self.builtin:
            return "builtin"
        return "long" if self.long is not None else "sync"

    def definition(self) -> ToolDefinition:
        """The tool as the model sees it."""
        return ToolDefinition(
            name=self.name, description=self.description, parameters=self.args.model_json_schema()
        )


class ToolRegistry:
    """The tools a worker can run, by name."""

    def __init__(self, specs: Iterable[ToolSpec]) -> None:
        self._specs: dict[str, ToolSpec] = {}
        # Built once per tool: generating a JSON schema costs more than the rest of a model
        # call's preparation, and every call sends the definitions.
        self._definitions: dict[str, ToolDefinition] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"tool {spec.name!r} is declared twice")
            if spec.handler is None and spec.long is None and not spec.builtin:
                raise ValueError(f"tool {spec.name!r} has neither a handler nor a long backend")
            self._specs[spec.name] = spec

    def names(self) -> list[str]:
        """Names of every registered tool, sorted."""
        return sorted(self._specs)

    def get(self, name: str) -> ToolSpec | None:
        """The tool of that name, or None."""
        return self._specs.get(name)

    def unknown(self, names: Iterable[str]) -> list[str]:
        """The names among `names` that no registered tool has."""
        return [name for name in names if name not in self._specs]

    def definitions(self, names: Sequence[str]) -> list[ToolDefinition]:
        """Definitions of the named tools, in order, followed by the built-in tools when any
        of them is a long tool (a run with operations can check and wait for them).

        Raises:
            KeyError: a name is not registered.
        """
        if missing := self.unknown(names):
            raise KeyError(f"unknown tools: {', '.join(missing)}; known: {', '.join(self.names())}")
        specs = [self._specs[name] for name in names]
        if any(spec.long is not None for spec in specs):
            specs += [
                self._specs[name]
                for name in BUILTIN_TOOLS
                if name in self._specs and name not in names
            ]
        return [self._definition(spec) for spec in specs]

    def _definition(self, spec: ToolSpec) -> ToolDefinition:
        if (known := self._definitions.get(spec.name)) is None:
            known = self._definitions[spec.name] = spec.definition()
        return known

    def parse(self, call: ToolCall) -> tuple[ToolSpec, BaseModel] | ToolResult:
        """The tool and its validated arguments, or an error result the model can act on."""
        spec = self._specs.get(call.name)
        if spec is None:
            return error_result(
                call, f"unknown tool {call.name!r}; available: {', '.join(self.names())}"
            )
        try:
            raw = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as err:
            return error_result(
                call, f"arguments are not valid JSON ({err.msg}); send a JSON object"
            )
        try:
            return spec, spec.args.model_validate(raw)
        except ValidationError as err:
            return error_result(call, f"invalid arguments for {call.name}: {describe_errors(err)}")

    async def run(self, call: ToolCall, context: Any = None) -> ToolResult:
        """Validate a sync tool call's arguments and run it (with `context`, a `RunContext`,
        when the tool takes one).

        Wrong arguments, unknown names and `ToolError`s come back as an error result the model
        can act on; any other exception propagates, so the caller's retry policy applies.
        """
        parsed = self.parse(call)
        if isinstance(parsed, ToolResult):
            return parsed
        spec, args = parsed
        if spec.handler is None:
            return error_result(call, f"{call.name} is not a tool that answers at once")
        try:
            output = await (
                spec.handler(args, context) if spec.takes_context else spec.handler(args)
            )
        except ToolError as err:
            return error_result(call, str(err))
        return ToolResult(tool_call_id=call.id, name=call.name, content=to_text(output))


def error_result(call: ToolCall, message: str) -> ToolResult:
    """A tool error the model reads as the call's result."""
    return ToolResult(tool_call_id=call.id, name=call.name, content=message, is_error=True)


def describe_errors(err: ValidationError, whole: str = "(arguments)") -> str:
    """One line per problem, naming the field (or `whole`), so the model knows exactly what
    to change."""
    problems = []
    for item in err.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or whole
        problems.append(f"{where}: {item['msg']}")
    return "; ".join(problems)


def to_text(output: Any) -> str:
    """A tool's output as the text the model reads: strings as they are, the rest as JSON."""
    if isinstance(output, str):
        return output
    if isinstance(output, BaseModel):
        return output.model_dump_json()
    return json.dumps(output, default=str)
