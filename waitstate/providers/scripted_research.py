"""The scripted model's part of the research demo (`make tree-demo`, examples/demo/research.py):
the lead that starts its researchers at once and reports what each found, and the researchers
that look a claim up or read what was paid on it. The `demo` script (scripted.py) plays them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from waitstate.providers.script_steps import (
    CLAIM,
    SCRIPTED_BANNER,
    call_tools,
    final_answer,
    tool_outcome,
)
from waitstate.schemas import Message
from waitstate.schemas.tree import SUB_AGENT_PREFIX


def lead(messages: Sequence[Message], task: str, agents: list[str]) -> Message:
    """Say the plan and start every sub-agent at once, each on its part of the task; once all
    have answered, report what each found."""
    results = [m for m in messages if m.role == "tool"]
    if not results:
        names = [agent.removeprefix(SUB_AGENT_PREFIX) for agent in agents]
        plan = f"Plan: {', '.join(names)} each research their part at once; then I report."
        parts = [
            (f"{SUB_AGENT_PREFIX}{n}", {"task": f"As {n}, your part of: {task}"}) for n in names
        ]
        return call_tools(0, *parts).model_copy(update={"content": plan})
    lines = []
    for result in results:
        try:
            found = json.loads(result.content)
        except json.JSONDecodeError:
            found = {"agent": result.name, "error": result.content}
        said = str(found.get("answer") or found.get("error") or found.get("status"))
        lines.append(f"- {found.get('agent')}: {said.removeprefix(SCRIPTED_BANNER).strip()}")
    return final_answer("\n".join([f"Report: {task}", *lines]))


def claim(messages: Sequence[Message], task: str, turn: int) -> Message:
    """Look the task's claim up, and answer with what the claims desk holds."""
    read = _read(messages, task, turn, "check_claim", "valid", "Claim")
    if isinstance(read, Message):
        return read
    claim_id, claim = read
    valid = "valid" if claim["valid"] else f"not valid ({claim.get('reason')})"
    return final_answer(
        f"Claim {claim_id} is {valid}: ${claim.get('amount', 0):g} for {claim.get('customer')}."
    )


def paid(messages: Sequence[Message], task: str, turn: int) -> Message:
    """Read what was refunded on the task's claim (a person approves the read first)."""
    read = _read(messages, task, turn, "read_payment_history", "refunded", "The payments on claim")
    if isinstance(read, Message):
        return read
    claim_id, history = read
    count = len(history.get("refunds", []))
    refunds = "1 refund" if count == 1 else f"{count} refunds"
    return final_answer(
        f"Refunded on claim {claim_id} so far: ${history['refunded']:g} ({refunds})."
    )


def _read(
    messages: Sequence[Message], task: str, turn: int, tool: str, key: str, what: str
) -> tuple[str, dict[str, Any]] | Message:
    """The task's claim and what `tool` said of it (holding `key`); or, before, the call of
    `tool`, and after a result without `key`, the answer that `what` could not be read."""
    claim_id = m.group(1).upper() if (m := CLAIM.search(task)) else "C-118"
    found = tool_outcome(messages, tool)
    if found is None:
        return call_tools(turn, (tool, {"claim_id": claim_id}))
    if key not in found:
        return final_answer(f"{what} {claim_id} could not be read: {json.dumps(found)}.")
    return claim_id, found
