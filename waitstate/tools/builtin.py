"""Built-in tools: declared here so models see them; answered by the workflow from its state."""

from __future__ import annotations

from waitstate.schemas.builtin import (
    ANSWER_QUESTION,
    GET_OPERATION_STATUS,
    REQUEST_APPROVAL,
    WAIT_FOR_OPERATIONS,
    GetOperationStatusArgs,
    RequestApprovalArgs,
    WaitForOperationsArgs,
)
from waitstate.schemas.questions import AnswerQuestionArgs
from waitstate.tools.spec import ToolSpec


def builtin_tools() -> list[ToolSpec]:
    """The operation tools every run with a long tool gets, `request_approval`, which a run
    gets when its tools list it, and `answer_question`, offered once an operation asks the
    model a question."""
    return [
        ToolSpec(
            name=REQUEST_APPROVAL,
            description=(
                "Ask a person to approve an action before you take it. Waits for their "
                "decision: approved, rejected (with their reason), or expired."
            ),
            args=RequestApprovalArgs,
            builtin=True,
        ),
        ToolSpec(
            name=GET_OPERATION_STATUS,
            description=(
                "Current status of an operation a long tool started: running, "
                "input_required, succeeded (with its result), failed (with the reason), "
                "expired or cancelled. Answers at once; does not wait."
            ),
            args=GetOperationStatusArgs,
            builtin=True,
        ),
        ToolSpec(
            name=WAIT_FOR_OPERATIONS,
            description=(
                "Wait until the given operations (or every pending one) have ended, then "
                "return their outcomes. Use it when you have nothing else to do."
            ),
            args=WaitForOperationsArgs,
            builtin=True,
        ),
        ToolSpec(
            name=ANSWER_QUESTION,
            description=(
                "Answer a question an operation's job asked you (its `questions`, each with a "
                "question_id, a message and the requested_schema of the answer): accept with "
                "content matching the schema, or decline. The job goes on with your answer."
            ),
            args=AnswerQuestionArgs,
            builtin=True,
        ),
    ]
