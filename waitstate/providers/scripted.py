"""A deterministic model that plays a script: for tests and the offline demo, never for real work.

Each script is a pure function of the conversation so far, so a replayed or retried call gives
the same answer. Every final answer starts with SCRIPTED_BANNER, so no one mistakes its output
for a language model's. A script may take a third parameter, the system prompt, to answer by
its instructions (`script(messages, tools, system_prompt)`).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from waitstate.providers.base import Adapter, ModelRequest, UnknownModelError
from waitstate.providers.script_steps import (
    CLAIM,
    call_tools,
    final_answer,
    from_rebuilt,
    latest_results,
    tool_outcome,
)
from waitstate.providers.script_steps import SCRIPTED_BANNER as SCRIPTED_BANNER
from waitstate.providers.scripted_research import claim, lead, paid
from waitstate.schemas import Message, ModelResponse, ToolDefinition, Usage
from waitstate.schemas.operations import TERMINAL_OPERATION_STATUSES
from waitstate.schemas.run import CHECKPOINT_PROMPT
from waitstate.schemas.tree import SUB_AGENT_PREFIX

# A script sees the conversation and the tools; one that takes a third parameter is also
# given the system prompt.
ToolsScript = Callable[[Sequence[Message], Sequence[ToolDefinition]], Message]
PromptScript = Callable[[Sequence[Message], Sequence[ToolDefinition], str], Message]
Script = ToolsScript | PromptScript

# The longest run of numbers, operators and parentheses that contains an operator.
_ARITHMETIC = re.compile(r"[-(]*\s*[\d.]+(?:[\s()]*(?:\*\*|//|[-+*/%])[\s(]*[\d.]+\)*)+")


class ScriptedProvider(Adapter):
    """Plays the script named by the model spec (`scripted:<name>`)."""

    name = "scripted"

    def __init__(self, scripts: Mapping[str, Script] | None = None) -> None:
        self._scripts = dict(SCRIPTS)
        self._scripts.update(scripts or {})
        self._reads_prompt = {name: _reads_prompt(s) for name, s in self._scripts.items()}

    async def aclose(self) -> None:
        """Nothing to release."""

    def names(self) -> list[str]:
        """Names of the scripts it can play."""
        return sorted(self._scripts)

    def check_model(self, model: str) -> None:
        """Raises UnknownModelError if there is no script named `model`."""
        if model not in self._scripts:
            raise UnknownModelError(
                f"no script named {model!r}; scripts: {', '.join(self.names())}"
            )

    async def answer(self, request: ModelRequest) -> ModelResponse:
        """Answer with the script's next message (`settings` do not change a script).

        Raises:
            UnknownModelError: no script of that name.
        """
        self.check_model(request.model)
        messages = request.messages
        # The run's checkpoint question (what is done, what remains) is answered from the
        # question itself, whatever the script: any model must answer it.
        reply = (
            _checkpoint(messages)
            if request.system_prompt == CHECKPOINT_PROMPT
            else self._play(request)
        )
        # Token counts are a deterministic stand-in (4 characters a token), so usage
        # accounting is exercised end to end without a real tokenizer.
        prompt = len(request.system_prompt) + sum(len(m.content) + _call_chars(m) for m in messages)
        usage = Usage(
            model_calls=1, input_tokens=prompt // 4 + 1, output_tokens=len(reply.content) // 4 + 1
        )
        stop = "tool_calls" if reply.tool_calls else "stop"
        return ModelResponse(
            message=reply, usage=usage, stop_reason=stop, model=f"scripted:{request.model}"
        )

    def _play(self, request: ModelRequest) -> Message:
        script = self._scripts[request.model]
        if self._reads_prompt[request.model]:
            reads = cast(PromptScript, script)
            return reads(request.messages, request.tools, request.system_prompt)
        return cast(ToolsScript, script)(request.messages, request.tools)


def _reads_prompt(script: Script) -> bool:
    """Whether `script` takes a third positional parameter (the system prompt)."""
    try:
        parameters = inspect.signature(script).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature: the two-argument kind
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in parameters if p.kind in positional) >= 3


def _checkpoint(messages: Sequence[Message]) -> Message:
    """`Done:` and `Remaining:` from the checkpoint question's Task, Completed and waiting-for
    lines."""
    lines = messages[-1].content.splitlines() if messages else []
    task = next((line.removeprefix("Task: ") for line in lines if line.startswith("Task: ")), "")
    completed = [line.removeprefix("- ") for line in lines if line.startswith("- ")]
    waiting_for = next(
        (
            line.removeprefix("Now waiting for: ")
            for line in lines
            if line.startswith("Now waiting for: ")
        ),
        "the wait",
    )
    done = (
        f"{len(completed)} steps completed; latest: {completed[-1]}" if completed else "nothing yet"
    )
    return Message(
        role="assistant",
        content=f"Done: {done}\nRemaining: once {waiting_for} is resolved, finish the task: {task}",
    )


def _call_chars(message: Message) -> int:
    return sum(len(c.name) + len(c.arguments) for c in message.tool_calls)


def _turn(messages: Sequence[Message]) -> int:
    """How many times the model has already answered in this conversation."""
    return sum(1 for m in messages if m.role == "assistant")


def _task(messages: Sequence[Message]) -> str:
    return next((m.content for m in messages if m.role == "user"), "")


def _at_once(report: str, *calls: tuple[str, dict[str, Any]]) -> Script:
    """A script that makes `calls` in one turn, then answers with what became of them, after
    `report`."""

    def script(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
        turn = _turn(messages)
        if turn == 0:
            return call_tools(turn, *calls)
        outcomes = [m.content for m in messages if m.role == "tool"]
        return final_answer(f"{report}: {'; '.join(outcomes)}")

    return script


def questions_for_the_model(content: str) -> list[dict[str, Any]]:
    """The questions a `wait_for_operations` result (its `content`) gives the model itself to
    answer (`answered_by` "you ..."), of the operations that have not ended; none in anything
    else. For scripts that answer them with `answer_question`."""
    try:
        outcomes = json.loads(content)
    except json.JSONDecodeError:
        return []
    if not isinstance(outcomes, list):
        return []
    return [
        question
        for outcome in outcomes
        if isinstance(outcome, dict) and outcome.get("status") not in TERMINAL_OPERATION_STATUSES
        for question in outcome.get("questions", [])
        if str(question.get("answered_by", "")).startswith("you")
    ]


_EXPORT_TASK = re.compile(r"\b(export|extract|dump)\b", re.IGNORECASE)
_DATASET = re.compile(r"\b(transactions|orders|invoices|payments|customers|refunds)\b", re.I)
_QUARTER = re.compile(r"\bQ([1-4])\b(?:\s*(?:of\s+)?(\d{4}))?", re.IGNORECASE)
_FOLDER = re.compile(r"\b([\w-]+)\s+folder\b", re.IGNORECASE)


def _export(messages: Sequence[Message], task: str, turn: int, offered: set[str]) -> Message:
    """Export a dataset (a long tool: the run waits for its webhook), verify the row count,
    file it in a folder, notify the team, answer; without the tools to file it, answer once
    the count is verified."""
    dataset = m.group(1).lower() if (m := _DATASET.search(task)) else "transactions"
    quarter = _QUARTER.search(task)
    period = f"{quarter.group(2) or '2025'}-Q{quarter.group(1)}" if quarter else "2025-Q3"
    folder = m.group(1).lower() if (m := _FOLDER.search(task)) else "compliance"
    export = tool_outcome(messages, "start_export")
    if export is None:
        return call_tools(turn, ("start_export", {"dataset": dataset, "period": period}))
    if export.get("status") != "succeeded":
        reason = export.get("error") or export
        return final_answer(
            f"The {dataset} export for {period} did not finish: {json.dumps(reason)}."
        )
    result = export.get("result") or {}
    file, rows = str(result.get("file", "")), int(result.get("rows", 0))
    checked = tool_outcome(messages, "verify_row_count")
    if checked is None and "verify_row_count" in offered:
        return call_tools(turn, ("verify_row_count", {"file": file, "expected_rows": rows}))
    if not {"upload_file", "notify_team"} <= offered:
        count = "" if checked is None else f"; {_checked(checked)}"
        return final_answer(f"Exported {rows} {dataset} rows for {period} to {file}{count}.")
    upload = tool_outcome(messages, "upload_file")
    if upload is None:
        return call_tools(turn, ("upload_file", {"file": file, "folder": folder}))
    path = str(upload.get("path", f"{folder}/{file}"))
    if tool_outcome(messages, "notify_team") is None:
        message = f"{dataset.capitalize()} export for {period} ({rows} rows) is filed at {path}."
        return call_tools(turn, ("notify_team", {"team": folder, "message": message}))
    return final_answer(
        f"Exported {rows} {dataset} rows for {period}, verified the row count, filed them at "
        f"{path} and notified the {folder} team."
    )


def _checked(count: dict[str, Any]) -> str:
    """What a `verify_row_count` result says."""
    if count.get("matches"):
        return "the row count checks out"
    return f"but the file holds {count.get('rows', count)} rows"


_REFUND_TASK = re.compile(r"\brefund", re.IGNORECASE)
_AMOUNT = re.compile(r"\$\s?(\d+(?:\.\d{1,2})?)")


def _refund(messages: Sequence[Message], task: str, turn: int) -> Message:
    """Check the claim, then issue the refund (which may wait for a person's sign-off)."""
    claim_id = m.group(1).upper() if (m := CLAIM.search(task)) else "C-118"
    claim = tool_outcome(messages, "check_claim")
    if claim is None:
        return call_tools(turn, ("check_claim", {"claim_id": claim_id}))
    if not claim.get("valid"):
        reason = claim.get("reason") or claim.get("error") or "it is not valid"
        return final_answer(f"No refund for claim {claim_id}: {reason}.")
    requested = float(m.group(1)) if (m := _AMOUNT.search(task)) else None
    amount = requested if requested is not None else float(claim.get("amount", 0))
    refund = tool_outcome(messages, "issue_refund")
    if refund is None:
        return call_tools(turn, ("issue_refund", {"claim_id": claim_id, "amount": amount}))
    if "refund_id" not in refund:
        return final_answer(
            f"The refund of ${amount:g} for claim {claim_id} was not issued: {json.dumps(refund)}."
        )
    return final_answer(
        f"Refunded ${amount:g} for claim {claim_id} (refund {refund['refund_id']})."
    )


def demo(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """The demo. An agent with sub-agents starts each once, then reports what they found; an
    export task (any wording with export/extract/dump) runs the export scenario, a refund task
    the refund scenario, a task naming a claim reads its payments or looks it up; anything else
    calls two tools at once, then a third, then answers."""
    offered = {t.name for t in tools}
    task = _task(messages)
    turn = _turn(messages)
    if agents := [t.name for t in tools if t.name.startswith(SUB_AGENT_PREFIX)]:
        return lead(messages, task, agents)
    if _EXPORT_TASK.search(task) and "start_export" in offered:
        return _export(messages, task, turn, offered)
    if _REFUND_TASK.search(task) and "issue_refund" in offered:
        return _refund(messages, task, turn)
    if CLAIM.search(task) and "read_payment_history" in offered:
        return paid(messages, task, turn)
    if CLAIM.search(task) and "check_claim" in offered:
        return claim(messages, task, turn)
    if turn == 0:
        match = _ARITHMETIC.search(task)
        expression = match.group(0).strip() if match else "6 * 7"
        calls = [("calculate", {"expression": expression}), ("utc_now", {})]
        if chosen := [c for c in calls if c[0] in offered]:
            return call_tools(turn, *chosen)
    counted = any(call.name == "count_words" for m in messages for call in m.tool_calls)
    if not counted and "count_words" in offered:
        return call_tools(turn, ("count_words", {"text": task}))
    found = latest_results(messages)
    parts = [f"{name} -> {m.content}" for name, m in sorted(found.items())]
    summary = "; ".join(parts) if parts else "no tools were used"
    return final_answer(f"Task: {task!r}. Results: {summary}.")


def echo(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Answers at once with the task."""
    return final_answer(_task(messages))


def forever(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Never finishes: calls `calculate` every turn (for max_turns)."""
    turn = _turn(messages)
    return call_tools(turn, ("calculate", {"expression": f"{turn} + 1"}))


def fix_args(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls `calculate` with a wrong argument name, reads the error, corrects it, answers."""
    turn = _turn(messages)
    if turn == 0:
        return call_tools(turn, ("calculate", {"expr": "2 + 2"}))
    last = messages[-1]
    if turn == 1 and last.is_error:
        return call_tools(turn, ("calculate", {"expression": "2 + 2"}))
    return final_answer(f"2 + 2 = {last.content}")


def unknown_tool(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls a tool it was not given, then reports the error it got back."""
    turn = _turn(messages)
    if turn == 0:
        return call_tools(turn, ("delete_everything", {}))
    return final_answer(f"the tool call failed: {messages[-1].content}")


def fan_out(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Three `calculate` calls in one turn, then the sum of their results."""
    turn = _turn(messages)
    if turn == 0:
        return call_tools(turn, *(("calculate", {"expression": f"{n} * {n}"}) for n in (2, 3, 4)))
    results = [m.content for m in messages if m.role == "tool"]
    return final_answer(f"squares {', '.join(results)}")


# Starts two exports in one turn, then reports what became of them.
two_exports = _at_once(
    "exports",
    ("start_export", {"dataset": "transactions", "period": "2025-Q2"}),
    ("start_export", {"dataset": "transactions", "period": "2025-Q3"}),
)


def enrich(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Runs the enrichment pipeline (a polled long tool), then reports its outcome."""
    turn = _turn(messages)
    if turn == 0:
        return call_tools(turn, ("enrich_dataset", {"dataset": "transactions"}))
    return final_answer(f"enrichment: {messages[-1].content}")


def check_and_wait(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Starts an export (handle mode), checks on it, waits for it, reports."""
    turn = _turn(messages)
    if turn == 0:
        return call_tools(turn, ("start_export", {"dataset": "transactions", "period": "2025-Q3"}))
    handle = tool_outcome(messages, "start_export") or {}
    operation_id = str(handle.get("operation_id", "unknown"))
    if turn == 1:
        return call_tools(turn, ("get_operation_status", {"operation_id": operation_id}))
    if turn == 2:
        return call_tools(turn, ("wait_for_operations", {"operation_ids": [operation_id]}))
    status = latest_results(messages)["get_operation_status"].content
    return final_answer(f"checked: {status}; waited: {messages[-1].content}")


def ask_first(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Asks a person (request_approval), then reports the decision it was told."""
    turn = _turn(messages)
    decided = from_rebuilt(messages, "request_approval")  # woken after a long wait
    if decided is not None:
        return final_answer(f"decision: {decided}")
    if turn == 0:
        action = {"action": _task(messages), "reason": "the task says to ask first"}
        return call_tools(turn, ("request_approval", action))
    return final_answer(f"decision: {messages[-1].content}")


# Issues two refunds over the threshold in one turn: two approvals open at once.
two_refunds = _at_once(
    "refunds",
    ("issue_refund", {"claim_id": "C-118", "amount": 420.0}),
    ("issue_refund", {"claim_id": "C-305", "amount": 1250.0}),
)


_REF = re.compile(r"ref://blobs/[0-9a-f]{64}")


def read_big(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls `big_report` (a huge result, passed by reference), reads a slice of it with
    read_ref, and answers with that slice."""
    turn = _turn(messages)
    if turn == 0:
        return call_tools(turn, ("big_report", {}))
    if turn == 1:
        ref = m.group(0) if (m := _REF.search(messages[-1].content)) else "none"
        return call_tools(turn, ("read_ref", {"ref": ref, "offset": 1_000_000, "length": 36}))
    return final_answer(f"slice: {messages[-1].content}")


def long_haul(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Calls `chunk` once a turn for 200 turns, then answers."""
    turn = _turn(messages)
    if turn < 200:
        return call_tools(turn, ("chunk", {"n": turn}))
    return final_answer("200 chunks read")


def expire_then_ask(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """Starts an export; in handle mode waits for it; then, whatever became of it, asks a person
    whether to go on (so the run is still open after the export ended), and answers."""
    turn = _turn(messages)
    export = tool_outcome(messages, "start_export")
    if export is None:
        return call_tools(turn, ("start_export", {"dataset": "transactions", "period": "2025-Q3"}))
    waited = tool_outcome(messages, "wait_for_operations")
    if export.get("status") == "running" and waited is None:
        operation_id = str(export.get("operation_id", "unknown"))
        return call_tools(turn, ("wait_for_operations", {"operation_ids": [operation_id]}))
    if tool_outcome(messages, "request_approval") is None:
        ended = json.dumps(waited if waited is not None else export)
        action = {"action": "carry on without the export", "reason": f"the export: {ended}"}
        return call_tools(turn, ("request_approval", action))
    return final_answer(f"decision: {messages[-1].content}")


SCRIPTS: dict[str, Script] = {
    "demo": demo,
    "echo": echo,
    "forever": forever,
    "fix-args": fix_args,
    "unknown-tool": unknown_tool,
    "fan-out": fan_out,
    "two-exports": two_exports,
    "enrich": enrich,
    "check-and-wait": check_and_wait,
    "ask-first": ask_first,
    "two-refunds": two_refunds,
    "read-big": read_big,
    "long-haul": long_haul,
    "expire-then-ask": expire_then_ask,
}
