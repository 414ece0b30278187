"""Sub-agents: the children a run starts, each a run of its own (a child workflow with its own
history, tools, waits and approvals), and the answers it waits for, holding no worker.

The model starts one with the tool `agent_<name>`; several in one turn run at once (the turn's
calls run concurrently) and the turn ends when all have ended, each answer or failure told to
the model as its call's result. A child's answer reaches the parent's history small (a long
one by reference), so a parent grows by about a kilobyte per child.

Cancel reaches the whole tree: a run cancelled while it waits for its children asks Temporal to
cancel them and waits until they have (each ends its own jobs and children first). A child
whose parent closes any other way is asked to cancel by Temporal (`REQUEST_CANCEL`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import (
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)

from waitstate.names import AGENT_NAME, AGENT_RUN, AGENT_STATUS
from waitstate.schemas import RunInput, RunResult, ToolCall, ToolResult, Usage
from waitstate.schemas.tree import (
    ANSWER_INLINE_BYTES,
    ANSWER_PREVIEW_CHARS,
    DEFAULT_MAX_CHILDREN,
    DEFAULT_MAX_DEPTH,
    STORE_ANSWER,
    SUB_AGENT_PREFIX,
    ChildRecord,
    StoreAnswer,
    SubAgentTask,
    TreeLink,
    TreeState,
    sub_agent_tool,
)

from . import ledger
from .activity_calls import Failed, call
from .parts import Part
from .policies import AGENT_CALL

# Of a child's task, what its parent's state and the Web UI's summary show.
TASK_PREVIEW = 120


class SubAgents(Part):
    """The run's children: started by its model's calls, waited for, their ends recorded."""

    def tools(self) -> list[str]:
        """The tools by which the run's model starts its sub-agents."""
        return [sub_agent_tool(name) for name in self._input.sub_agents or ()]

    def owns(self, name: str) -> bool:
        return name in self.tools()

    async def settled_if_cancelled(self, err: BaseException) -> None:
        """When a call of the turn failed with `err`: if the run is being cancelled, once none
        of its sub-agents runs (each ends its own jobs and children first), whichever call's
        cancel came back first; at once otherwise, or if it started none."""
        tree = self._state.tree
        if is_cancelled_exception(err) and tree is not None and tree.running():
            await workflow.wait_condition(lambda: tree.running() == 0)

    def root(self) -> str:
        """The workflow id of the tree's root (this run's, if it is the root)."""
        link = self._input.tree
        return link.root if link is not None else workflow.info().workflow_id

    def usage(self) -> Usage:
        """What the run's subtree spent: its own calls and its children's subtrees'."""
        own = self._state.usage
        return own if self._state.tree is None else own + self._state.tree.usage()

    async def answer_for_parent(self, output: str | None) -> str | None:
        """A child's answer as its parent gets it: itself when short, else a preview and the
        reference of all of it (kept for the parent, which reads it with read_ref). A store
        that cannot keep it leaves the preview, saying so."""
        link = self._input.tree
        if link is None or output is None or len(output.encode()) <= ANSWER_INLINE_BYTES:
            return output
        stored = await call(
            STORE_ANSWER,
            StoreAnswer(text=output, owner=link.parent_id),
            result_type=str,
            summary="answer for the parent",
            **AGENT_CALL,
        )
        if isinstance(stored, Failed):
            return (
                f"{output[:ANSWER_PREVIEW_CHARS]}\n[cut: the answer is "
                f"{len(output.encode())} bytes, and the store could not keep it: "
                f"{stored.message}]"
            )
        return stored

    async def run(self, call: ToolCall) -> ToolResult:
        """Start the sub-agent `call` names on its task and wait for it to end: its answer, or
        why it has none, as the call's result. A call past the tree's depth or the run's
        children limit is refused to the model, and starts nothing."""
        agent = call.name.removeprefix(SUB_AGENT_PREFIX)
        args = ledger.arguments(call, SubAgentTask)
        if isinstance(args, ToolResult):
            return args
        link = self._input.tree
        path = link.path if link is not None else []
        max_depth = link.max_depth if link is not None else self._input.max_depth
        max_depth = max_depth or DEFAULT_MAX_DEPTH
        if len(path) >= max_depth:
            return ledger.error_result(
                call,
                f"refused: {agent} would be {len(path) + 1} levels below the root, and this "
                f"tree goes {max_depth} deep at most; do this part yourself",
            )
        tree = self._state.tree = self._state.tree or TreeState()
        limit = self._input.max_children or DEFAULT_MAX_CHILDREN
        if tree.running() >= limit:
            return ledger.error_result(
                call,
                f"refused: {limit} sub-agents of this run are running, its limit; "
                "start more once some have answered",
            )
        node = f"{agent}-{tree.started + 1}"
        parent = workflow.info().workflow_id
        run_id = f"{parent}/{node}"
        record = ChildRecord(
            run_id=run_id, agent=agent, node=node, task=ledger.preview(args.task, TASK_PREVIEW)
        )
        tree.children[run_id] = record
        budgeted = link.budget if link is not None else self._input.budget is not None
        child = TreeLink(
            root=self.root(),
            parent=parent if parent != self.root() else None,
            path=[*path, node],
            max_depth=max_depth,
            budget=budgeted,
        )
        extra: dict[str, Any] = {"tenant": self._input.tenant} if self._input.tenant else {}
        # A fork's sub-agent: a fork of the child the recorded run started on the same task.
        forked = self._input.fork.child(agent, args.task) if self._input.fork else None
        if forked is not None:
            extra |= {"fork": forked} | ({"model": forked.model} if forked.model else {})
        input = RunInput(
            task=args.task,
            agent=agent,
            tree=child,
            model_task_queue=self._input.model_task_queue,
            **extra,
        )
        attributes = TypedSearchAttributes(
            [
                SearchAttributePair(AGENT_STATUS, "running"),
                SearchAttributePair(AGENT_NAME, agent),
            ]
        )
        with self._board.waiting(
            "agents",
            f"waiting for sub-agent {child.line()}",
            f"sub-agent {node}",
            checkpointed=False,
        ):
            try:
                handle = await workflow.start_child_workflow(
                    AGENT_RUN,
                    input,
                    id=run_id,
                    result_type=RunResult,
                    parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                    search_attributes=attributes,
                    static_summary=f"{child.line()}: {record.task}",
                )
                result: RunResult = await handle
            except WorkflowAlreadyStartedError:
                record.status = "failed"
                return ledger.error_result(call, f"{node} could not start: {run_id} exists")
            except ChildWorkflowError as err:
                cancelled = is_cancelled_exception(err)
                record.status = "cancelled" if cancelled else "failed"
                task = asyncio.current_task()
                if cancelled and task is not None and task.cancelling():
                    raise asyncio.CancelledError from None  # this run is cancelled: so is its tree
                reason = str(err.cause or err)
                return ledger.error_result(
                    call,
                    ledger.to_json({"agent": node, "status": record.status, "error": reason}),
                )
        record.status = result.status
        record.usage = result.usage
        outcome = {"agent": node, "status": result.status}
        if result.final_output is not None:
            outcome["answer"] = result.final_output
        if result.error is not None:
            outcome["error"] = result.error
        return ToolResult(
            tool_call_id=call.id,
            name=call.name,
            content=ledger.to_json(outcome),
            is_error=result.status != "completed",
        )
