"""Pure, deterministic helpers of an agent run: the lines of its ledger, the context rebuilt from
it, what the model is told of operations and approvals, and the few encodings the run uses.

Plain functions over the schemas, calling no Temporal API: the workflow imports this module
passed through its sandbox (loaded once per worker), and tests call it directly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, TypedDict, TypeVar

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from waitstate.schemas import RunInput, RunState, RunStatus, Step, ToolCall, ToolResult, Usage
from waitstate.schemas.approvals import ApprovalRequest
from waitstate.schemas.errors import LATER_MODEL_INVALID
from waitstate.schemas.operations import Completion, Operation
from waitstate.schemas.run import Checkpoint, RejectedOutput

Args = TypeVar("Args", bound=BaseModel)
Named = TypeVar("Named")

PREVIEW_CHARS = 160
# The ledger's lines, and the rebuilt context made of them, are bounded, so a rebuilt context
# costs the same after ten turns or ten thousand.
LEDGER_CHARS = 300
REBUILD_COMPLETED_LINES = 20
REBUILD_EVENT_CHARS = 4000
# A model failure's message, as the run records it: Temporal refuses failures past its size.
FAILURE_CHARS = 2000
# What a run keeps of an answer its agent's output type refused, and of why.
REJECTED_CHARS = 2000


def first_state(input: RunInput) -> RunState:
    """A run's state as it begins (a task's fork's, with the recorded turns it keeps)."""
    turns = input.fork.at if input.fork is not None and input.thread is None else 0
    return RunState(
        task=input.task, model=input.model, constraints=list(input.constraints), turns=turns
    )


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def cut(text: str, limit: int) -> str:
    """`text` as it is (lines kept), cut to `limit` characters with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rejected_output(turn: int, answer: str, errors: str) -> RejectedOutput:
    """What the run keeps of an answer its agent's output type refused: bounded, whatever the
    model wrote."""
    return RejectedOutput(
        turn=turn, answer=cut(answer, REJECTED_CHARS), errors=cut(errors, REJECTED_CHARS)
    )


def output_never_valid(turns: int, rejected: RejectedOutput) -> str:
    """Why a run ended `output_invalid`, in one bounded line."""
    return preview(
        f"no answer matched the agent's output type within max_turns ({turns}); the last, on "
        f"turn {rejected.turn}, was refused: {rejected.errors}",
        FAILURE_CHARS,
    )


def to_json(value: object) -> str:
    """Compact JSON, as the model reads tool results and operation outcomes."""
    return json.dumps(value, default=str, separators=(",", ":"))


def nonce_hash(value: str) -> str:
    """What the run keeps of a nonce (its tokens carry the nonce itself)."""
    return hashlib.sha256(value.encode()).hexdigest()


def error_result(call: ToolCall, message: str) -> ToolResult:
    """A tool call's result that tells the model what went wrong."""
    return ToolResult(tool_call_id=call.id, name=call.name, content=message, is_error=True)


def arguments(call: ToolCall, schema: type[Args]) -> Args | ToolResult:
    """A built-in tool's arguments, as `schema` has them; or, where the model got them wrong,
    the result that tells it so."""
    try:
        return schema.model_validate_json(call.arguments or "{}")
    except ValueError as err:
        return error_result(call, f"invalid arguments for {call.name}: {err}")


class JobOf(TypedDict):
    """What names an operation's job to the activities that reach its system (its polls and
    checks, its cancel, the answers to its questions)."""

    operation_id: str
    tool: str
    job_id: str


def job_of(op: Operation) -> JobOf:
    """The fields that name `op`'s job to its system."""
    return JobOf(operation_id=op.operation_id, tool=op.tool, job_id=op.job_id)


def named(
    call: ToolCall, schema: type[Args], items: Mapping[str, Named], noun: str
) -> tuple[Args, Named] | ToolResult:
    """A built-in tool's arguments and what of the run they name by `<noun>_id` (an operation,
    a question), from `items`; or, where the model got either wrong, the result that tells it
    so."""
    args = arguments(call, schema)
    if isinstance(args, ToolResult):
        return args
    key = str(getattr(args, f"{noun}_id"))
    item = items.get(key)
    if item is None:
        return error_result(call, f"no {noun} {key!r} in this run")
    return args, item


def same_report(status: str, progress: str | None, completion: Completion) -> bool:
    """A progress report that would change nothing an operation (or held report) shows."""
    return (
        completion.status in ("running", "input_required")
        and completion.status == status
        and (completion.progress or progress) == progress
    )


def wait_kind(ops: Iterable[Operation]) -> str:
    """What the run waits for while `ops` run: a webhook if any completes by callback."""
    return "webhook" if any(op.completion == "callback" for op in ops) else "poll"


def approval_outcome(request: ApprovalRequest) -> dict[str, object]:
    """What the model is told of a request: approved, rejected with the reason, or expired."""
    outcome: dict[str, object] = {"request_id": request.request_id, "approval": request.status}
    if request.decision is not None:
        outcome["reviewer"] = request.decision.reviewer
        outcome["comment"] = request.decision.comment
        outcome["by_policy"] = request.decision.by_policy
    if request.status == "expired":
        outcome["reason"] = f"nobody decided by {request.expires_at.isoformat()}"
    return outcome


def completed_line(name: str, content: str) -> str:
    """The ledger's line for a finished tool call or a changed operation."""
    return f"{name}: {preview(content, LEDGER_CHARS)}"


def checkpoint_prompt(state: RunState, waiting_for: str) -> str:
    """The question a checkpoint asks the model: the task, constraints and what is done, in a
    conversation of its own (the transcript may end in tool calls still waiting for their
    results, which no provider accepts a question after)."""
    return "\n".join(
        [
            f"Task: {state.task}",
            f"Constraints: {'; '.join(state.constraints) or 'none'}",
            "Completed:",
            *(f"- {line}" for line in state.completed[-REBUILD_COMPLETED_LINES:]),
            f"Now waiting for: {waiting_for}",
        ]
    )


def parse_checkpoint(text: str) -> tuple[str, str] | None:
    """The model's `Done:` and `Remaining:` lines, bounded; None if either is missing."""
    parts = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    done, remaining = parts.get("Done", "").strip(), parts.get("Remaining", "").strip()
    if not done or not remaining:
        return None
    return preview(done, LEDGER_CHARS), preview(remaining, LEDGER_CHARS)


def ledger_checkpoint(state: RunState, waiting_for: str, pending: Sequence[str]) -> tuple[str, str]:
    """`Done` and `Remaining` built from the ledger, when the model writes none."""
    recent = "; ".join(state.completed[-3:]) or "nothing yet"
    done = (
        f"{state.turns} model turns and {state.tool_calls} tool calls; "
        f"latest: {preview(recent, LEDGER_CHARS)}"
    )
    remaining = (
        f"once {', '.join(pending) if pending else waiting_for} is resolved, "
        "continue the task from what is completed"
    )
    return done, remaining


def rebuilt_context(state: RunState, event: str, checkpoint: Checkpoint | None) -> str:
    """The one message a model starts afresh from after a long wait: Task, Constraints,
    Completed, Event, Remaining. Its size depends on the ledger's bounded lines, not on the
    transcript left behind."""
    completed = state.completed[-REBUILD_COMPLETED_LINES:]
    skipped = len(state.completed) - len(completed)
    return "\n".join(
        [
            f"Task: {state.task}",
            f"Constraints: {'; '.join(state.constraints) or 'none'}",
            "Completed:",
            *([f"- ({skipped} earlier steps not shown)"] if skipped else []),
            *(f"- {line}" for line in completed),
            f"Event: {preview(event, REBUILD_EVENT_CHARS)}",
            f"Remaining: {checkpoint.remaining if checkpoint else 'continue the task'}",
        ]
    )


def step(
    state: RunState,
    kind: Literal["model", "tool", "event"],
    name: str,
    detail: str,
    *,
    is_error: bool = False,
) -> None:
    """Add a line to the run's progress (`RunState.steps`), in the current turn."""
    state.steps.append(
        Step(turn=state.turns, kind=kind, name=name, detail=detail, is_error=is_error)
    )


def add_completed(state: RunState, lines: Iterable[str]) -> None:
    """Add finished tool calls' and changed operations' lines (`RunState.completed`)."""
    state.completed.extend(lines)


def failed(state: RunState, reason: str) -> None:
    """Record why the run (not a thread's message) ends failed or cut short."""
    state.error = reason


def answered(state: RunState, output: str | None) -> None:
    """Record the run's answer: its final output, or a thread's latest reply."""
    state.final_output = output


def spent(state: RunState, usage: Usage) -> None:
    """Add tokens the run's model spent outside a turn (a job's requests answered by it)."""
    state.usage += usage


def context_rebuilt(state: RunState, detail: str) -> None:
    """Count a context rebuilt from the ledger, and say why in the run's progress."""
    state.context_rebuilds += 1
    step(state, "event", "context", detail)


def trim(state: RunState, keep: int) -> None:
    """Bound what continue-as-new carries of the progress and the finished lines: the latest
    `keep` of each."""
    state.steps = state.steps[-keep:]
    state.completed = state.completed[-keep:]


def model_failure(
    spec: str, cause: BaseException | None, limit_seconds: float, attempts: str
) -> str:
    """Why the model could not be called, naming the provider, the limit and the attempts, in
    one bounded line. `cause` is the activity's failure (a timeout, or its error); `attempts`
    says how many were made (e.g. "gave up after 8 attempts"), or is empty. A model the run
    would go on with later that cannot be called is named by its own failure, not `spec`."""
    if isinstance(cause, ApplicationError) and cause.type == LATER_MODEL_INVALID:
        what = f"the model its budget degrades to, {cause.message}"
    elif isinstance(cause, ActivityTimeoutError):
        what = f"{spec} did not answer within {limit_seconds:g} s (model_timeout)"
    elif isinstance(cause, FailureError):
        what = f"{spec}: {cause.message}"
    else:
        what = f"{spec}: {cause}"
    return preview(f"{what}; {attempts}" if attempts else what, FAILURE_CHARS)


def out_of_turns(state: RunState) -> RunStatus:
    """How a run that used its turns ends: `output_invalid` when its last answer was refused
    by the agent's output type, saying why; else `max_turns`."""
    rejected = state.rejected_output
    if rejected is None or rejected.turn != state.turns:
        return "max_turns"
    failed(state, output_never_valid(state.turns, rejected))
    return "output_invalid"


def add_usage(state: RunState, usage: Usage) -> None:
    """Count one model call and its tokens. The activity reports the tokens; the call itself is
    counted here (activities before the run counted their own call report it as one)."""
    state.usage += usage if usage.model_calls else usage + Usage(model_calls=1)
