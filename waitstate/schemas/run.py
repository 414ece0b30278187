"""Inputs, results and state of an agent run, and of the activities it calls."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal, Self, get_args

from pydantic import BaseModel, Field, field_validator, model_validator

from waitstate.schemas.approvals import ApprovalNeeded, ApprovalPolicy, ApprovalRequest
from waitstate.schemas.budgets import Budget, BudgetState
from waitstate.schemas.messages import Message, ModelResponse, ToolCall, ToolDefinition, Usage
from waitstate.schemas.operations import Operation, OperationStarted, ResultMode
from waitstate.schemas.questions import InputRequest
from waitstate.schemas.threads import ThreadSettings, ThreadState

RunStatus = Literal[
    "running",
    "waiting",
    "completed",
    "failed",
    "cancelled",
    "max_turns",
    "approval_expired",
    "output_invalid",
    "budget_exceeded",
]
# Every status but those of a run still going: a new way to end is one line, above.
TERMINAL_STATUSES: frozenset[str] = frozenset(get_args(RunStatus)) - {"running", "waiting"}

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful assistant. Use the tools you are given when they help; "
    "when a tool returns an error, read it and correct your call. "
    "Answer the task plainly when you are done."
)


# What an agent's definition sets in a run of it, unless the run's starter set it.
AGENT_FIELDS = frozenset(
    {
        "system_prompt",
        "model",
        "tools",
        "approval",
        "max_turns",
        "operation_timeout",
        "constraints",
        "thread",
        "budget",
        "tenant",
    }
)
# Temporal's limit on a fairness key, which a tenant is on the model queue.
TENANT_MAX_BYTES = 64


def check_tenant(tenant: str | None) -> str | None:
    """`tenant`, if it can be a fairness key: not blank, at most 64 bytes (UTF-8).

    Raises:
        ValueError: it cannot; the message says why.
    """
    if tenant is None:
        return None
    if not tenant.strip():
        raise ValueError("a tenant must not be blank (None: no tenant)")
    if len(tenant.encode()) > TENANT_MAX_BYTES:
        raise ValueError(
            f"a tenant is at most {TENANT_MAX_BYTES} bytes (Temporal's fairness keys); "
            f"got {len(tenant.encode())}: {tenant[:80]!r}"
        )
    return tenant


def parse_model_spec(spec: str) -> tuple[str, str]:
    """Split `provider:model` into its parts.

    Raises:
        ValueError: the spec is not of that form, or a part is blank or has spaces around it
            (`anthropic: ` would otherwise reach the provider as a model named " ").
    """
    provider, sep, model = spec.partition(":")
    if not sep or not provider.strip() or not model.strip():
        raise ValueError(
            f"model spec {spec!r} is not provider:model "
            "(e.g. openai:gpt-4.1, anthropic:claude-sonnet-4-5, scripted:demo)"
        )
    if provider != provider.strip() or model != model.strip():
        raise ValueError(f"model spec {spec!r} has spaces around the provider or model name")
    return provider, model


class RunInput(BaseModel):
    """Everything a run needs to know; it travels in the workflow's start event."""

    task: str = Field(min_length=1)
    agent: str | None = Field(
        default=None,
        description="The agent this run is of: its definition, as the worker has it, sets "
        "every field this input leaves unset.",
    )
    model: str = Field(default="scripted:demo", description="provider:model, e.g. openai:gpt-4.1")
    tools: list[str] = Field(
        default_factory=list, description="Names of the tools the run may use."
    )
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_turns: int = Field(default=12, ge=1, description="Model calls before the run stops.")
    model_timeout: timedelta = timedelta(seconds=120)
    tool_timeout: timedelta = timedelta(seconds=120)
    max_in_flight: int = Field(default=8, ge=1, description="Pending operations a run may have.")
    operation_timeout: timedelta | None = Field(
        default=None,
        description="No operation of this run waits longer than this, whatever its tool "
        "declares; past it the job is cancelled and the operation expires.",
    )
    operation_mode: ResultMode | None = Field(
        default=None,
        description="`await` or `handle` for every long tool of this run, instead of what each "
        "tool declares.",
    )
    approval: ApprovalPolicy = Field(
        default_factory=ApprovalPolicy, description="For the model's own request_approval calls."
    )
    constraints: list[str] = Field(
        default_factory=list, description="Rules the run must keep; repeated in rebuilt context."
    )
    rebuild_after: timedelta = Field(
        default=timedelta(minutes=5),
        description="After a wait longer than this, the model gets a context rebuilt from the "
        "ledger instead of the old transcript.",
    )
    continue_as_new_after_events: int | None = Field(
        default=None,
        ge=10,
        description="Continue as new past this many history events (besides when Temporal "
        "suggests it); for tests and tuning.",
    )
    carry: RunCarry | None = Field(
        default=None, description="Set by continue-as-new: where the previous run left off."
    )
    mcp_listing: McpListing | None = Field(
        default=None,
        description="Set by the run once it listed the MCP tools it was granted: every turn, "
        "worker and continued run sees the same definitions.",
    )
    thread: ThreadSettings | None = Field(
        default=None,
        description="Set for a thread: the run takes a person's messages (`send_message`) and "
        "answers each, instead of one task (`task` then says what the thread is for).",
    )
    agent_overrides: list[str] | None = Field(
        default=None,
        description="For a run of an agent: the fields its starter set, which the agent's "
        "definition does not replace (filled in when the input is made).",
    )
    budget: Budget | None = Field(
        default=None,
        description="What the run may spend on its model calls, and what happens when it has.",
    )
    model_task_queue: str | None = Field(
        default=None,
        min_length=1,
        description="The task queue its model calls go on (None: the run's own); set where "
        "runs start, from WAITSTATE_MODEL_TASK_QUEUE.",
    )
    tenant: str | None = Field(
        default=None,
        description="Whose run this is: its model calls carry it as their fairness key, so "
        "tenants share the model queue fairly where the server balances by key.",
    )

    @field_validator("tenant")
    @classmethod
    def _check_tenant(cls, tenant: str | None) -> str | None:
        return check_tenant(tenant)

    @model_validator(mode="after")
    def _note_overrides(self) -> Self:
        if self.agent is not None and self.agent_overrides is None:
            self.agent_overrides = sorted(self.model_fields_set & AGENT_FIELDS)
        return self

    def model_specs(self) -> list[tuple[str, str]]:
        """Every model spec the run may call, each with where it was given: its `model`, and
        its budget's `degrade_to`."""
        specs = [("model", self.model)]
        if self.budget is not None and self.budget.degrade_to is not None:
            specs.append(("budget's degrade_to", self.budget.degrade_to))
        return specs

    def check_models(self) -> None:
        """What a start can check of the models the run may call, before the run meets one it
        cannot: each spec's form (`provider:model`, no blank or padded name), and that a dollar
        budget prices the model it degrades to. Not a validator: a run recorded with such an
        input must still be read, to fail or replay as it did.

        Raises:
            ValueError: naming the spec and where it was given.
        """
        for where, spec in self.model_specs():
            try:
                parse_model_spec(spec)
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
        if self.budget is not None and self.budget.degrades_unpriced():
            raise ValueError(
                f"budget's degrade_to: {self.budget.degrade_to!r} has no price in the budget's "
                "table, and a dollar budget calls no model it cannot price"
            )


class Checkpoint(BaseModel):
    """What was done and what remains, committed before the run suspends."""

    at: datetime
    waiting_for: str
    done: str
    remaining: str


class RejectedOutput(BaseModel):
    """A final answer that did not validate against the agent's output type: sent back to the
    model with the errors; a run whose last answer was one ends `output_invalid`."""

    turn: int
    answer: str = Field(description="The model's answer as it gave it (its start, if long).")
    errors: str = Field(description="Why it did not validate, one problem after another.")


class Step(BaseModel):
    """One line of a run's progress: a model turn or a tool call, as it happened."""

    turn: int
    kind: Literal["model", "tool", "event"]
    name: str = Field(description="The model spec, or the tool's name.")
    detail: str = Field(
        default="", description="A one-line preview: the answer, arguments, result."
    )
    is_error: bool = False


class StoreOutage(BaseModel):
    """The blob store is unavailable and a call waits for it."""

    call: str = Field(description="What waits, e.g. `model call`.")
    since: datetime
    tries: int = Field(description="Calls that met the outage so far.")
    error: str = Field(description="The store's latest error.")
    next_try_at: datetime


class RunState(BaseModel):
    """Where a run is: returned by the `status` query and, once closed, by the CLI."""

    status: RunStatus = "running"
    agent: str | None = None
    task: str = ""
    model: str = ""
    turns: int = 0
    tool_calls: int = 0
    usage: Usage = Field(default_factory=Usage)
    steps: list[Step] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    completed: list[str] = Field(
        default_factory=list, description="One line per finished tool call, oldest first."
    )
    checkpoint: Checkpoint | None = None
    context_rebuilds: int = 0
    references: int = Field(default=0, description="Tool results passed by reference.")
    continued_as_new: int = 0
    operations: dict[str, Operation] = Field(default_factory=dict)
    approvals: dict[str, ApprovalRequest] = Field(default_factory=dict)
    ignored_decisions: list[str] = Field(
        default_factory=list, description="Decisions for requests this run does not have."
    )
    questions: dict[str, InputRequest] = Field(
        default_factory=dict, description="Questions its operations' jobs asked, by question id."
    )
    final_output: str | None = None
    rejected_output: RejectedOutput | None = Field(
        default=None,
        description="The latest answer refused by the agent's output type, while no later "
        "answer validated (a run that ends `output_invalid` keeps it).",
    )
    store_outage: StoreOutage | None = Field(
        default=None, description="Set while a call waits for the blob store to come back."
    )
    thread: ThreadState | None = Field(
        default=None, description="A thread's messages and replies (None: a task run)."
    )
    budget: BudgetState | None = Field(
        default=None, description="What it spent against its budget (None: it has none)."
    )
    error: str | None = None


class RunResult(BaseModel):
    """What a finished run returns."""

    status: RunStatus
    final_output: str | None = None
    turns: int
    tool_calls: int
    usage: Usage
    error: str | None = Field(default=None, description="Why the run ended, if not by answering.")
    rejected_output: RejectedOutput | None = Field(
        default=None, description="Set when the run ended `output_invalid`: its last answer."
    )


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
    mcp_listing: str | None = Field(
        default=None, description="The run's MCP listing (a blob reference), for MCP tools."
    )
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


class ParkedCall(BaseModel):
    """A tool call of an unfinished turn that was waiting when the run continued as new."""

    kind: Literal["operation", "operations"] = Field(
        description="`operation`: an await-mode long tool; `operations`: wait_for_operations."
    )
    operation_ids: list[str]
    deadline: datetime | None = Field(
        default=None, description="wait_for_operations' own timeout, if it had one."
    )
    since: datetime = Field(description="When the wait began.")


class CarriedTurn(BaseModel):
    """A turn whose tool calls were waiting when the run continued as new: the next run waits
    on, then gives the model every result of the turn at once."""

    calls: list[ToolCall]
    results: list[ToolResult | None] = Field(description="Per call; None while it waits.")
    parked: dict[str, ParkedCall] = Field(description="By tool call id.")


class RunCarry(BaseModel):
    """What a run hands to its continuation: the ledger, the conversation by reference, what
    is not sent yet, and every operation still pending."""

    state: RunState
    transcript_ref: str | None = None
    unsent: list[Message]
    answer: str | None = Field(
        default=None, description="Set when the run was waiting for operations after answering."
    )
    turn: CarriedTurn | None = Field(
        default=None, description="Set when the run continued as new in the middle of a turn."
    )
    waiting_since: datetime | None = Field(
        default=None,
        description="Set when the run continued as new while it waited between turns: when "
        "that wait began (it goes on, and is not checkpointed again).",
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
    mcp_listing: str | None = Field(
        default=None, description="The run's MCP listing (a blob reference), for MCP tools."
    )


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
NOTIFY_INPUT = "notify_input"
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

    def defaults(self) -> dict[str, Any]:
        """The `RunInput` fields it sets, by name."""
        fields: dict[str, Any] = {
            "system_prompt": self.system_prompt,
            "tools": list(self.tools),
            "approval": self.approval,
            "max_turns": self.max_turns,
            "constraints": list(self.constraints),
        }
        if self.model is not None:
            fields["model"] = self.model
        if self.operation_timeout is not None:
            fields["operation_timeout"] = self.operation_timeout
        if self.budget is not None:
            fields["budget"] = self.budget
        if self.tenant is not None:
            fields["tenant"] = self.tenant
        return fields


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


CarriedTurn.model_rebuild()
RunCarry.model_rebuild()
RunInput.model_rebuild()
