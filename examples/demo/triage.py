"""Claim triage: an agent whose answer is structured (`Triage`), a scripted model for it, and the
scorer an evaluation of the demo's runs uses (`triage_valid`).

The triage agent looks the claim up (`check_claim`, on the demo claims desk) and answers JSON:
pay a valid claim of up to $100, send a larger one to review, deny an invalid one. Its scripted
model answers in prose instead when its instructions ask for plain prose (`PROSE_PROMPT`): the
regression an evaluation of a changed prompt should catch. Prose fails the output type, is sent
back to be corrected, and the run ends `output_invalid` once its turns are used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ValidationError

from waitstate import SCRIPTED_BANNER, Agent, EvalCase, Message, ToolCall, ToolDefinition

TRIAGE_INSTRUCTIONS = (
    "You triage insurance claims. Look the claim up with check_claim, then decide: pay a valid "
    "claim of $100 or less, send a larger valid claim to review, deny an invalid one."
)
# A planted regression: the same instructions, asking for prose (what the script reads).
PROSE_PROMPT = f"{TRIAGE_INSTRUCTIONS} Answer in plain prose, a sentence or two."
PROSE_MARKER = "plain prose"
# The largest claim paid without a review.
PAY_UP_TO = 100
CLAIM = re.compile(r"\b(C-\d+)\b", re.IGNORECASE)


class Triage(BaseModel):
    """What the triage agent answers."""

    claim: str
    decision: Literal["pay", "review", "deny"]
    amount: int


def triage_script(
    messages: Sequence[Message], tools: Sequence[ToolDefinition], system_prompt: str
) -> Message:
    """Looks the task's claim up, then answers its triage: as JSON, or in prose when the system
    prompt asks for plain prose (every turn, so the run never gets a valid answer)."""
    task = next((m.content for m in messages if m.role == "user"), "")
    claim_id = m.group(1).upper() if (m := CLAIM.search(task)) else "C-118"
    looked_up = [m.content for m in messages if m.role == "tool" and m.name == "check_claim"]
    if not looked_up:
        arguments = json.dumps({"claim_id": claim_id})
        call = ToolCall(id="call_0_0", name="check_claim", arguments=arguments)
        return Message(role="assistant", tool_calls=[call])
    try:
        claim = json.loads(looked_up[-1])
    except json.JSONDecodeError:
        claim = {"error": looked_up[-1]}  # no such claim: denied
    triage = _triage(claim_id, claim if isinstance(claim, dict) else {})
    if PROSE_MARKER in system_prompt.lower():
        prose = f"Claim {triage.claim} should be {triage.decision}: ${triage.amount}."
        return Message(role="assistant", content=f"{SCRIPTED_BANNER} {prose}")
    # The answer must validate as JSON, so it carries no banner: the run's recorded model
    # (`scripted:triage`) says where it came from.
    return Message(role="assistant", content=triage.model_dump_json())


def _triage(claim_id: str, claim: dict[str, object]) -> Triage:
    amount = claim.get("amount", 0)
    dollars = int(amount) if isinstance(amount, int | float) else 0
    if claim.get("valid") is not True:
        return Triage(claim=claim_id, decision="deny", amount=0)
    decision: Literal["pay", "review"] = "pay" if dollars <= PAY_UP_TO else "review"
    return Triage(claim=claim_id, decision=decision, amount=dollars)


def triage_valid(case: EvalCase) -> tuple[bool, str]:
    """A triage fork answered a valid `Triage` with its original's decision; a run of another
    agent ended as its original did."""
    if case.agent != "triage":
        same = case.new_status == case.original_status
        return same, "" if same else f"{case.original_status} became {case.new_status}"
    try:
        new = Triage.model_validate_json(case.new_answer or "")
    except ValidationError:
        return False, f"not a triage ({case.new_status}): {(case.new_answer or '')[:80]}"
    try:
        original = Triage.model_validate_json(case.original_answer or "")
    except ValidationError:
        return False, "the original answered no triage"
    same = new.decision == original.decision
    return same, "" if same else f"{original.decision} became {new.decision}"


TRIAGE = Agent(
    "triage",
    instructions=TRIAGE_INSTRUCTIONS,
    model="scripted:triage",
    tools=["check_claim"],
    output_type=Triage,
    # A lookup, an answer, and two chances to correct one the output type refused.
    max_turns=4,
)
