"""The names the library calls the workflows by (`waitstate.names`) are the workflows' own: the
library sends Updates, queries and starts by name, so a handler renamed or retyped in
`workflows/` alone would fail only at run time, against a real run."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from waitstate import names
from waitstate.schemas import RunInput, RunResult, RunState
from waitstate.schemas.approvals import DecideInput, DecideOutcome, DecisionSignal
from waitstate.schemas.cleanup import CleanResult, CleanupInput
from waitstate.schemas.operations import (
    CheckOperation,
    CheckOutcome,
    CompleteOperation,
    CompletionOutcome,
)
from waitstate.schemas.pushes import PushConfigChange, PushConfigs
from waitstate.schemas.questions import AnswerInput, AnswerOutcome
from waitstate.schemas.threads import MessageAccepted, SendMessage
from waitstate.schemas.tree import BudgetAnswer, BudgetAsk
from waitstate.workflows import search_attributes, traces
from waitstate.workflows.agent_run import AgentRunWorkflow
from waitstate.workflows.blob_cleanup import BlobCleanupWorkflow


def _definition(cls: type[Any]) -> Any:
    # The SDK's own reading of the decorators: what a worker registers, by name.
    return workflow._Definition.must_from_class(cls)


def test_the_agent_run_answers_to_the_library_names_with_the_types_it_reads() -> None:
    definition = _definition(AgentRunWorkflow)

    assert definition.name == names.AGENT_RUN
    assert (definition.arg_types, definition.ret_type) == ([RunInput], RunResult)
    assert {name: query.ret_type for name, query in definition.queries.items()} == {
        names.STATUS_QUERY: RunState
    }
    assert {
        name: (update.arg_types, update.ret_type) for name, update in definition.updates.items()
    } == {
        names.COMPLETE_OPERATION_UPDATE: ([CompleteOperation], CompletionOutcome),
        names.DECIDE_UPDATE: ([DecideInput], DecideOutcome),
        names.ANSWER_UPDATE: ([AnswerInput], AnswerOutcome),
        names.SEND_MESSAGE_UPDATE: ([SendMessage], MessageAccepted),
        names.TREE_BUDGET_UPDATE: ([BudgetAsk], BudgetAnswer),
        names.PUSH_CONFIG_UPDATE: ([PushConfigChange], PushConfigs),
        names.CHECK_OPERATION_UPDATE: ([CheckOperation], CheckOutcome),
    }
    assert {name: signal.arg_types for name, signal in definition.signals.items()} == {
        names.OPERATION_COMPLETED_SIGNAL: [CompleteOperation],
        names.APPROVE_SIGNAL: [DecisionSignal],
        names.REJECT_SIGNAL: [DecisionSignal],
    }


def test_the_blob_cleanup_answers_to_its_library_name() -> None:
    definition = _definition(BlobCleanupWorkflow)

    assert definition.name == names.BLOB_CLEANUP
    assert (definition.arg_types, definition.ret_type) == ([CleanupInput], CleanResult)


def test_the_workflows_take_their_search_attributes_and_span_function_from_the_library() -> None:
    # The very objects, not copies that could drift.
    assert search_attributes.ALL is names.SEARCH_ATTRIBUTES
    assert search_attributes.WAIT_KINDS is names.WAIT_KINDS
    assert traces.WAIT_SPAN_FUNCTION is names.WAIT_SPAN_FUNCTION
    assert [key.name for key in names.SEARCH_ATTRIBUTES] == [
        "AgentStatus",
        "WaitingFor",
        "PendingOperations",
        "WaitExpiresAt",
        "AgentName",
        "ThreadId",
        "ForkOf",
    ]
