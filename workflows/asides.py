"""Steering during an approval wait: a thread's message that comes
while a tool call of the turn waits for a person's decision is answered at once, in a model
call of its own, and the wait goes on untouched.

The call is made mid-turn: the model's last message holds tool calls that have no results yet.
So it is sent the transcript with a placeholder result for each (pending, and why), then the
person's message; its answer is the message's reply. That exchange is not kept in the
transcript, which goes on from the tool calls: once the turn's results are in, the model is
told, after them, what was said meanwhile (`told`), so it never sees a call answered twice.
"""

from __future__ import annotations

from waitstate.schemas import (
    Message,
    ModelCallInput,
    ModelResponse,
    ToolCall,
)
from waitstate.schemas.approvals import ApprovalRequest
from waitstate.schemas.run import CALL_MODEL

from . import ledger
from .activity_calls import Failed, call
from .parts import Part, RunParts
from .policies import MODEL_RETRY, model_call
from .thread import Conversation

# What the model is told of a call of its turn that has no result yet.
AWAITING = (
    "pending: waiting for {approvers} to approve this call (request {request_id}, until "
    "{until}); it runs once approved, and its result comes then. The person's message that "
    "follows came meanwhile: answer it in words, without calling tools."
)
PENDING = "pending: this call has not finished; its result comes once it has."
# What the model is told once the turn's results are in.
TOLD = (
    "While your calls were pending, the person wrote ({message_id}): {text}\nYou answered: {reply}"
)
# How much of a message and of its reply the model is told, once the turn's results are in.
TOLD_CHARS = 4000
# A reply when the model answered the aside with tool calls only (it was asked not to).
NO_WORDS = "(working on it: waiting for approval of {tool}; the answer comes once it is decided)"


class ApprovalAsides(Part):
    """Answers a thread's messages while a call of the turn waits for an approval."""

    def __init__(self, run: RunParts, thread: Conversation) -> None:
        super().__init__(run)
        self._thread = thread
        # The tool calls of the turn under way (the model's last message), and the tools the
        # model had for it.
        self._calls: list[ToolCall] = []
        self._tools: list[str] = []
        # What was said while they were pending, for the model once their results are in.
        self._told: list[str] = []

    def turn(self, calls: list[ToolCall], tools: list[str]) -> None:
        """The turn's tool calls begin, made with `tools`."""
        self._calls, self._tools = calls, tools

    def wanted(self) -> bool:
        """Whether a message waits to be answered aside."""
        return self._thread.steering(nested=True)

    async def answer(self, request: ApprovalRequest) -> None:
        """Answer the next queued message now: the model sees the turn's calls pending (this
        one for `request`), then the message."""
        message = self._thread.take_aside(during=f"the approval of {request.tool}", keep=False)
        try:
            response = await self._ask(message.message_id, message.text, request)
            if isinstance(response, Failed):
                self._thread.replied(None, "failed", response.reason)
                return
            ledger.add_usage(self._state, response.usage)
            reply = response.message.content or NO_WORDS.format(tool=request.tool)
            ledger.step(self._state, "model", self._input.model, ledger.preview(reply))
            self._told.append(
                TOLD.format(
                    message_id=message.message_id,
                    text=ledger.cut(message.text, TOLD_CHARS),
                    reply=ledger.cut(reply, TOLD_CHARS),
                )
            )
            self._thread.replied(reply)
        finally:
            self._thread.end_aside()

    async def _ask(
        self, message_id: str, text: str, request: ApprovalRequest
    ) -> ModelResponse | Failed:
        """The model call of an aside: the transcript, the turn's calls pending, the message.
        Its new transcript is left behind (see the module's docstring)."""
        pending = [
            Message(role="tool", tool_call_id=c.id, name=c.name, content=self._pending(c, request))
            for c in self._calls
        ]
        return await call(
            CALL_MODEL,
            ModelCallInput(
                model=self._input.model,
                system_prompt=self._input.system_prompt,
                transcript_ref=self._memory.transcript_ref,
                new_messages=[*self._memory.unsent, *pending, Message(role="user", content=text)],
                tools=self._tools,
                agent=self._input.agent,
                mcp_listing=self._input.mcp_listing.ref if self._input.mcp_listing else None,
            ),
            result_type=ModelResponse,
            summary=f"model {self._input.model}: message {message_id} aside",
            retry_policy=MODEL_RETRY,
            **model_call(self._input),
        )

    def told(self) -> list[Message]:
        """What was said while the turn's calls were pending (once, after their results)."""
        told, self._told = self._told, []
        return [Message(role="user", content="\n\n".join(told))] if told else []

    def _pending(self, tool_call: ToolCall, request: ApprovalRequest) -> str:
        if tool_call.id != request.tool_call_id:
            return PENDING
        return AWAITING.format(
            approvers=request.sent_to[-1],
            request_id=request.request_id,
            until=request.expires_at.isoformat(timespec="seconds"),
        )
