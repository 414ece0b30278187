"""An agent run's input, state and result, and what it carries across continue-as-new. What it
sends the activities it calls and gets back is in `waitstate.schemas.calls` (its names are
imported here too, as they were before it moved)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, Self, get_args

from pydantic import BaseModel, Field, field_validator, model_validator

from waitstate.schemas.approvals import ApprovalPolicy, ApprovalRequest
from waitstate.schemas.budgets import Budget, BudgetState
from waitstate.schemas.calls import (
    ANSWER_OPERATION,
    AWAIT_MODEL_RESPONSE,
    CALL_MODEL,
    CALL_TOOL,
    CANCEL_MODEL_RESPONSE,
    CANCEL_OPERATION,
    CHECKPOINT_PROMPT,
    DEFAULT_SYSTEM_PROMPT,
    LIST_MCP_TOOLS,
    NOTIFY_APPROVAL,
    NOTIFY_QUESTION,
    OUTPUT_INVALID,
    POLL_OPERATION,
    RESOLVE_AGENT,
    AgentConfig,
    AwaitModelResponse,
    CancelModelResponse,
    McpListing,
    McpListInput,
    McpTool,
    ModelCallInput,
    StoreFailure,
    ToolCallInput,
    ToolResult,
)
from waitstate.schemas.forks import ForkOf, ForkState
from waitstate.schemas.messages import Message, ToolCall, Usage
from waitstate.schemas.operations import Operation, ResultMode
from waitstate.schemas.pushes import MAX_PUSH_CONFIGS, PushConfig, PushState
from waitstate.schemas.questions import InputRequest
from waitstate.schemas.specs import TENANT_MAX_BYTES, check_tenant, parse_model_spec
from waitstate.schemas.threads import ThreadSettings, ThreadState
from waitstate.schemas.tree import (
    MAX_CHILDREN_LIMIT,
    MAX_DEPTH_LIMIT,
    TreeBudget,
    TreeLink,
    TreeState,
)

# Its own names, and those of `calls` that were defined here before it moved.
__all__ = [
    "AGENT_FIELDS",
    "ANSWER_OPERATION",
    "AWAIT_MODEL_RESPONSE",
    "AgentConfig",
    "AwaitModelResponse",
    "CALL_MODEL",
    "CALL_TOOL",
    "CANCEL_MODEL_RESPONSE",
    "CANCEL_OPERATION",
    "CHECKPOINT_PROMPT",
    "CancelModelResponse",
    "CarriedTurn",
    "Checkpoint",
    "DEFAULT_SYSTEM_PROMPT",
    "LIST_MCP_TOOLS",
    "McpListInput",
    "McpListing",
    "McpTool",
    "ModelCallInput",
    "NOTIFY_APPROVAL",
    "NOTIFY_QUESTION",
    "OUTPUT_INVALID",
    "POLL_OPERATION",
    "ParkedCall",
    "RESOLVE_AGENT",
    "RejectedOutput",
    "RunCarry",
    "RunInput",
    "RunResult",
    "RunState",
    "RunStatus",
    "Step",
    "StoreFailure",
    "StoreOutage",
    "TENANT_MAX_BYTES",
    "TERMINAL_STATUSES",
    "ToolCallInput",
    "ToolResult",
    "check_tenant",
    "parse_model_spec",
]

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
        "sub_agents",
        "max_children",
        "max_depth",
    }
)
# The newest revision of the agent run's behaviour that a run's input carries (docs/versions.md,
# "Revisions"): 1, a run that completes upserts no `AgentStatus` as it ends.
REVISION = 1


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
    sub_agents: list[str] | None = Field(
        default=None,
        description="The agents the run may start, each a run of its own, by the tool "
        "`agent_<name>` (waitstate/schemas/tree.py).",
    )
    max_children: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CHILDREN_LIMIT,
        description="Sub-agents the run may have running at once (None: 10).",
    )
    max_depth: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DEPTH_LIMIT,
        description="For a tree's root: the levels below it the tree may grow to (None: 3).",
    )
    tree: TreeLink | None = Field(
        default=None, description="Set for a sub-agent's run, by its parent: where it is."
    )
    fork: ForkOf | None = Field(
        default=None, description="Set for a fork: the run it goes on from, and how (forks.py)."
    )
    push: list[PushConfig] | None = Field(
        default=None,
        max_length=MAX_PUSH_CONFIGS,
        description="Set for an A2A task whose client asked for push notifications as it "
        "started it: the webhooks told of each change of the task's state (workflows/pushes.py).",
    )

    revision: int = Field(
        default=REVISION,
        ge=0,
        le=REVISION,
        description="The revision of the run's behaviour it was started with (docs/versions.md): "
        "the newest unless set. A run recorded before revisions were carried has none and "
        "replays as 0 (`recorded_revision`); the run it continues as new gets the newest.",
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

    def recorded_revision(self) -> int:
        """The revision the run was started with: 0 for an input recorded before revisions
        were carried, which has no `revision` (its history must replay as it was recorded;
        the input is recorded whole, so every later one has it)."""
        return self.revision if "revision" in self.model_fields_set else 0

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
    """Where a run is: returned by the `status` query and, once closed, by the CLI.

    Each field the run changes has one writer (a part of `workflows/`, or its ledger's
    functions); the others ask it. `tests/workflows/test_state_writers.py` holds the code to
    this list.

    Writers:
        status: StatusBoard
        agent, model, constraints: Opening
        turns, tool_calls, references, rejected_output: AgentRunWorkflow
        steps, completed, usage, error, final_output, context_rebuilds: ledger
        checkpoint: Memory
        operations: OperationsBook
        approvals, ignored_decisions: ApprovalDesk
        questions: QuestionDesk
        budget: Budgets
        store_outage: StoreOutages
        continued_as_new: Continuation
        tree: SubAgents
        tree_budget: Budgets
        fork: Fork
        push: Pushes
    """

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
    tree: TreeState | None = Field(
        default=None, description="The sub-agents it started (None: it started none)."
    )
    tree_budget: TreeBudget | None = Field(
        default=None,
        description="Its tree's budget: a root's, what each node spent; a node's, what it "
        "reported (None: no tree budget).",
    )
    fork: ForkState | None = Field(
        default=None, description="A fork's: how its tool calls were answered."
    )
    push: PushState | None = Field(
        default=None, description="An A2A task's push configurations (None: it has none)."
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


CarriedTurn.model_rebuild()
RunCarry.model_rebuild()
RunInput.model_rebuild()
