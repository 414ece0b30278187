"""The names a run's workflows answer to, in one place: their types, their handlers, their
search attributes, and the function a traced worker hands them.

The client, the gateway, the MCP server and the blob cleanup never import `waitstate.workflows`:
its modules are the worker's to load (and the sandbox's to pass through), not every client's.
So they start workflows, send Updates and read queries and search attributes by these names,
with the result types given at each call; `waitstate/workflows/` defines its workflows with
them, and `tests/waitstate/test_names.py` holds the workflows' definitions to them (handler
names are their methods' names, so they are checked rather than repeated in the decorators).
Only the worker, the plugin and the CLI's replay and versions commands load the workflows.

Recorded histories and running workflows know these names: renaming one breaks them.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from temporalio.common import SearchAttributeKey

# --- workflow types ----------------------------------------------------------------------------

AGENT_RUN = "AgentRunWorkflow"  # RunInput -> RunResult
BLOB_CLEANUP = "BlobCleanupWorkflow"  # CleanupInput -> CleanResult
EVAL_RUN = "EvalWorkflow"  # EvalInput -> EvalReport (forks of recorded runs, scored)
EVAL_REPORT_QUERY = "report"  # -> EvalReport, its rows so far

# --- AgentRunWorkflow's handlers ---------------------------------------------------------------

STATUS_QUERY = "status"  # -> RunState
COMPLETE_OPERATION_UPDATE = "complete_operation"  # CompleteOperation -> CompletionOutcome
OPERATION_COMPLETED_SIGNAL = "operation_completed"  # CompleteOperation
APPROVE_SIGNAL = "approve"  # DecisionSignal
REJECT_SIGNAL = "reject"  # DecisionSignal
DECIDE_UPDATE = "decide"  # DecideInput -> DecideOutcome
ANSWER_UPDATE = "answer"  # AnswerInput -> AnswerOutcome
SEND_MESSAGE_UPDATE = "send_message"  # SendMessage -> MessageAccepted (threads)
TREE_BUDGET_UPDATE = "tree_budget"  # BudgetAsk -> BudgetAnswer (a node of its tree reserves)
PUSH_CONFIG_UPDATE = "push_config"  # PushConfigChange -> PushConfigs (an A2A task's webhooks)
CHECK_OPERATION_UPDATE = "check_operation"  # CheckOperation -> CheckOutcome (check its job now)

# --- search attributes: what makes runs filterable in the Web UI's list view -----------------

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
WAITING_FOR = SearchAttributeKey.for_keyword("WaitingFor")
# What WaitingFor holds: an operation's webhook or poll, a person's decision or answer, a
# thread's next message, its sub-agents; `none` while the run works (a model turn, a tool call).
WAIT_KINDS = ("webhook", "poll", "approval", "input", "message", "agents", "none")
PENDING_OPERATIONS = SearchAttributeKey.for_int("PendingOperations")
WAIT_EXPIRES_AT = SearchAttributeKey.for_datetime("WaitExpiresAt")
# Set when a run of a named agent starts (by the client, never upserted by the run).
AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")
# Set when a thread starts, to its id (by the client, never upserted by the run); continued
# runs keep it. `ThreadId IS NOT NULL` lists the threads.
THREAD_ID = SearchAttributeKey.for_keyword("ThreadId")
# Set when a fork starts, to the id of the run it forks (by the client, never upserted by the
# run): `ForkOf IS NULL` leaves forks out of a listing, `ForkOf = 'run-1'` lists run-1's forks.
FORK_OF = SearchAttributeKey.for_keyword("ForkOf")

# Temporal's own, set on every child workflow (and a root, to itself): `RootWorkflowId = 'ROOT'`
# lists every node of an agent tree, its root among them.
ROOT_WORKFLOW_ID = "RootWorkflowId"

SEARCH_ATTRIBUTES = (
    AGENT_STATUS,
    WAITING_FOR,
    PENDING_OPERATIONS,
    WAIT_EXPIRES_AT,
    AGENT_NAME,
    THREAD_ID,
    FORK_OF,
)

# --- tracing -----------------------------------------------------------------------------------

# The name the tracing interceptor (`waitstate.tracing`) gives its function among the workflow's
# extern functions, by which `workflows/traces.py` records a wait's span.
WAIT_SPAN_FUNCTION = "__waitstate_wait_span"


# --- the CLI -----------------------------------------------------------------------------------


def cli_command() -> str:
    """The CLI as a person types it where this process runs, for the commands hints and notices
    print: the `waitstate` script beside this interpreter, relative to the working directory
    when inside it (`.venv/bin/waitstate` in a checkout, as the README types it), or plain
    `waitstate` when that is the one PATH finds."""
    script = Path(sys.executable).parent / "waitstate"
    found = shutil.which("waitstate")
    if found is not None and Path(found).resolve() == script.resolve():
        return "waitstate"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script) if script.is_absolute() else os.path.abspath(script)
