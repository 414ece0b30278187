"""What an agent run sends the activities it calls, and what they give back: the model and
tool calls, an agent's definition and MCP listing, the prompts the run adds, and the activities'
names."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, Field

from waitstate.schemas.approvals import ApprovalNeeded, ApprovalPolicy
from waitstate.schemas.budgets import Budget
from waitstate.schemas.messages import Message, ModelResponse, ToolCall, ToolDefinition
from waitstate.schemas.operations import OperationStarted, ResultMode
from waitstate.schemas.threads import ThreadSettings

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful assistant. Use the tools you are given when they help; "
    "when a tool returns an error, read it and correct your call. "
    "Answer the task plainly when you are done."
)

# The run's MCP listing as the activities it calls get it: a reference to the stored `McpListing`.
McpListingRef = Annotated[
    str | None, Field(description="The run's MCP listing (a blob reference), for MCP tools.")
]


class ModelCallInput(BaseModel):
    """Input of the `call_model` activity: what is new since the last call, and a reference to
    the conversation before it, so a run's history grows with each turn's news, not with the
    transcript's length."""

    model: str
    # At its default it is left out of the recorded input (see waitstate.converter).
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    transcript_ref: str | None = Field(
        default=None, description="The conversation so far (None: a new conversation)."
    )
    new_messages: list[Message]
    tools: list[str] = Field(description="Tool names; the activity resolves their definitions.")
    agent: str | None = Field(
        default=None,
        description="The run's agent: its model settings apply, and a final answer must "
        "validate against its output type.",
    )
    mcp_listing: McpListingRef = None
    answered: ModelResponse | None = Field(
        default=None,
        description="The model's reply to this very call, given before the blob store failed "
        "to keep the conversation: stored now, and the model is not asked again.",
    )
    later_models: list[str] = Field(
        default_factory=list,
        description="The model specs the run may go on with later (its budget's `degrade_to`, "
        "until it switched): the call fails, not retried, if this worker cannot call one, so "
        "the run ends at once rather than when it switches.",
    )


class AwaitModelResponse(BaseModel):
    """Input of the `await_model_response` activity: the call whose background response the
    provider is working on, and how often to ask for it."""

    call: ModelCallInput = Field(description="The call that created the response, as it was.")
    response_id: str
    first_poll_seconds: float = Field(gt=0, description="The wait before the first check.")
    max_poll_seconds: float = Field(
        gt=0, description="The checks' interval doubles after each one, up to this."
    )


class CancelModelResponse(BaseModel):
    """Input of the `cancel_model_response` activity: the background response to stop."""

    model: str = Field(description="The run's model spec, whose provider answers.")
    response_id: str
    reason: str = Field(description="Why (for the worker's log): `expired`, `cancelled`.")


class StoreFailure(BaseModel):
    """The details of a call that failed on the blob store (`BLOB_STORE_UNAVAILABLE`), for a
    run that waits the outage out (one whose retry policy does not retry that failure)."""

    attempt: int = Field(
        description="The attempt that met the outage; those before it failed "
        "otherwise, and count against the call's own retries."
    )
    answered: ModelResponse | None = Field(
        default=None, description="The model's reply, when it came before the store failed."
    )


class ToolCallInput(BaseModel):
    """Input of the `call_tool` activity. The run's id, the operation's (the activity's own id)
    and the time the call was first scheduled are the activity's info, not sent."""

    call: ToolCall
    in_flight: int = Field(default=0, description="This run's pending operations of this tool.")
    run_in_flight: int = Field(default=0, description="This run's pending operations, all tools.")
    run_max_in_flight: int = Field(default=8, description="The run's limit of pending operations.")
    approved_by: str | None = Field(
        default=None, description="The approval request that cleared this call, if any."
    )
    stub: bool = Field(
        default=False, description="A fork's call: the app's stub for the tool answers it."
    )
    operation_timeout: timedelta | None = Field(
        default=None, description="The run's cap on how long an operation may wait."
    )
    operation_mode: ResultMode | None = Field(
        default=None, description="The run's choice of result mode for long tools."
    )
    nonce: str | None = Field(
        default=None,
        description="Chosen by the run for a callback operation: every token minted for it "
        "carries this nonce, whichever key signs it. Not a secret (a token needs the key).",
    )
    mcp_listing: McpListingRef = None


class ToolResult(BaseModel):
    """What a tool call gives back to the model."""

    # The call's: the `call_tool` activity leaves both to the run, which has the call (its
    # history is the shorter for it; results of runs before 1.0 carry them, to the same end).
    tool_call_id: str = ""
    name: str = ""
    content: str
    is_error: bool = False
    operation: OperationStarted | None = Field(
        default=None, description="Set when a long tool started a job instead of answering."
    )
    approval_needed: ApprovalNeeded | None = Field(
        default=None, description="Set when the call did not run: a person must approve it."
    )
    content_ref: str | None = Field(
        default=None, description="The full result, stored by reference; `content` previews it."
    )


# A checkpoint's question: a conversation of its own, answered in two lines (any model, the
# scripted one too, must answer it).
CHECKPOINT_PROMPT = (
    "You keep the notes of an agent that is about to wait. From the task and what is "
    "completed, reply with exactly two lines:\n"
    "Done: <what has been done, one sentence>\n"
    "Remaining: <the steps left once the wait is over, one sentence>"
)

# Activity names, shared so workflows can call activities without importing their modules
# (which bring in provider SDKs the workflow sandbox would re-import on every run).
CALL_MODEL = "call_model"
CALL_TOOL = "call_tool"
POLL_OPERATION = "poll_operation"
CANCEL_OPERATION = "cancel_operation"
NOTIFY_APPROVAL = "notify_approval"
RESOLVE_AGENT = "resolve_agent"
LIST_MCP_TOOLS = "list_mcp_tools"
# A question's notice: its activity keeps the name of a question's old name, "input", which
# histories record.
NOTIFY_QUESTION = "notify_input"
ANSWER_OPERATION = "answer_operation"
AWAIT_MODEL_RESPONSE = "await_model_response"
CANCEL_MODEL_RESPONSE = "cancel_model_response"

# What the model is told when its final answer does not validate against the agent's output
# type.
OUTPUT_INVALID = (
    "Your answer does not match the required output: {errors}. Answer again with only a JSON "
    "object that matches the schema."
)


class AgentConfig(BaseModel):
    """An agent's definition as a run of it records it (the `resolve_agent` activity's result):
    the run's defaults, whatever the worker's apps say later."""

    name: str
    system_prompt: str
    model: str | None = None
    tools: list[str] = Field(default_factory=list)
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    max_turns: int = Field(default=12, ge=1)
    operation_timeout: timedelta | None = None
    constraints: list[str] = Field(default_factory=list)
    output_schema: dict[str, Any] | None = Field(
        default=None, description="The JSON schema the final answer must validate against."
    )
    thread: ThreadSettings | None = Field(
        default=None,
        description="How its threads take messages, unless a thread's starter said otherwise.",
    )
    budget: Budget | None = None
    tenant: str | None = None
    sub_agents: list[str] = Field(default_factory=list)
    max_children: int | None = None
    max_depth: int | None = None

    def defaults(self) -> dict[str, Any]:
        """The `RunInput` fields it sets, by name."""
        fields: dict[str, Any] = {
            "system_prompt": self.system_prompt,
            "tools": list(self.tools),
            "approval": self.approval,
            "max_turns": self.max_turns,
            "constraints": list(self.constraints),
        }
        # The optional ones only where the agent sets them: unset, the run keeps its own.
        optional = {
            "model": self.model,
            "operation_timeout": self.operation_timeout,
            "budget": self.budget,
            "tenant": self.tenant,
            "sub_agents": self.sub_agents or None,
            "max_children": self.max_children,
            "max_depth": self.max_depth,
        }
        return fields | {name: value for name, value in optional.items() if value is not None}


class McpListing(BaseModel):
    """The MCP tools a run was granted, listed once: their definitions and hints are stored by
    reference (a list of `McpTool`), their names (`server__tool`) kept here."""

    ref: str
    names: list[str]


class McpTool(BaseModel):
    """One MCP tool as a run's listing keeps it."""

    definition: ToolDefinition
    destructive: bool = False
    idempotent: bool = False
    read_only: bool = False
    requires_approval: bool = Field(
        default=False, description="Destructive, on a server whose operator wants approval."
    )
    reads: bool = Field(
        default=False,
        description="One of the server's resource or prompt tools (`resources__read`...), "
        "answered by the worker from the server's resources or prompts, not a tool of its own.",
    )


class McpListInput(BaseModel):
    """Input of the `list_mcp_tools` activity: the run's MCP grants."""

    grants: list[str]
