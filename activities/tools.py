"""Tool activities: run a sync tool, or start a long tool's job.

A call heartbeats while it runs (`activities.pulse`): a sync tool may take minutes, and a worker
lost under it is noticed within the call's heartbeat timeout (`workflows.policies.TOOL_HEARTBEAT`)
rather than the run's `tool_timeout`. So a tool must not block the worker's event loop for that
long (run blocking work with `asyncio.to_thread`): its heartbeats would stop, and the call be
taken for lost and tried again.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from waitstate.blobs import BlobStore, BlobStoreUnavailable
from waitstate.blobs.results import shrink
from waitstate.mcp import is_mcp_name
from waitstate.schemas import ToolCall, ToolCallInput, ToolResult
from waitstate.schemas.approvals import ApprovalNeeded
from waitstate.schemas.builtin import REF_PREFIX
from waitstate.schemas.errors import RUN_INPUT_INVALID
from waitstate.schemas.operations import OperationStarted
from waitstate.schemas.run import CALL_TOOL
from waitstate.tools import LongSpec, StartContext, ToolError, ToolRegistry, ToolSpec
from waitstate.tools.function import RunContext
from waitstate.tools.spec import error_result
from waitstate.tracing import tool_span

from .mcp import McpActivities, read_listing
from .pulse import pulse

if TYPE_CHECKING:
    from waitstate.auth.tokens import ResumeTokens
    from waitstate.tracing import Tracing

INLINE_RESULT_BYTES = 1024
INLINE_PREVIEW_CHARS = 600


class ToolActivities:
    """Tool calls, given the worker's tools, resume-token keys and gateway address, what each
    tool's app provides its handlers (`deps`, by tool name), and its MCP servers; with `tracing`,
    each call is a span (`execute_tool {tool}`)."""

    def __init__(
        self,
        tools: ToolRegistry,
        blobs: BlobStore,
        tokens: ResumeTokens | None = None,
        gateway_url: str = "",
        deps: Mapping[str, Any] | None = None,
        mcp: McpActivities | None = None,
        *,
        tracing: Tracing | None = None,
    ) -> None:
        self._tools = tools
        self._tracing = tracing
        self._blobs = blobs
        self._tokens = tokens
        self._gateway_url = gateway_url.rstrip("/")
        self._deps = dict(deps or {})
        self._mcp = mcp

    @activity.defn(name=CALL_TOOL)
    async def call_tool(self, input: ToolCallInput) -> ToolResult:
        """Run one tool call, or start a long tool's job and say how to wait for it.

        Bad arguments come back as an error result for the model to correct; an unexpected
        exception propagates so the workflow's retry policy applies.
        """
        call = input.call
        # The id of the operation a long tool's call starts: the activity's.
        operation_id = activity.info().activity_id if self._tracing else None
        with tool_span(self._tracing, call.name, call.id, operation_id) as span:
            span.arguments(call.arguments)
            async with pulse():
                result = await self._call(input)
            span.result(result)
        # The run has the call: its id and name would only lengthen the run's history.
        return result.model_copy(update={"tool_call_id": "", "name": ""})

    async def _call(self, input: ToolCallInput) -> ToolResult:
        if is_mcp_name(input.call.name):
            return await self._call_mcp(input)
        parsed = self._tools.parse(input.call)
        if isinstance(parsed, ToolResult):
            return parsed
        spec, args = parsed
        if input.stub:
            return await self._by_reference(await stubbed(spec, args, input.call))
        if input.approved_by is None and spec.needs_approval(args):
            # Not run: the workflow asks a person and calls again with `approved_by` set.
            return ToolResult(
                tool_call_id=input.call.id,
                name=input.call.name,
                content="",
                approval_needed=ApprovalNeeded(
                    reason=f"{spec.name} {args.model_dump_json()}", policy=spec.approval
                ),
            )
        if spec.long is None:
            workflow_id = activity.info().workflow_id or ""
            context = RunContext(
                run_id=workflow_id,
                tool_call_id=input.call.id,
                idempotency_key=f"{workflow_id}/{input.call.id}",
                deps=self._deps.get(spec.name),
            )
            return await self._by_reference(await self._tools.run(input.call, context))
        return await self._start(spec, spec.long, args, input)

    async def _call_mcp(self, input: ToolCallInput) -> ToolResult:
        """A call of an MCP server's tool the run was granted (it is in the run's listing)."""
        call = input.call
        listing = (
            await read_listing(self._blobs, input.mcp_listing)
            if input.mcp_listing is not None and self._mcp is not None
            else {}
        )
        tool = listing.get(call.name)
        if tool is None:
            granted = ", ".join(sorted(listing)) or "none"
            return error_result(
                call, f"{call.name} is not an MCP tool of this run; its MCP tools: {granted}"
            )
        assert self._mcp is not None
        # Whether a person must approve the call first is the MCP activities' to say.
        result = await self._mcp.call(input, tool)
        return result if result.operation is not None else await self._by_reference(result)

    async def _start(
        self, spec: ToolSpec, long: LongSpec, args: BaseModel, input: ToolCallInput
    ) -> ToolResult:
        call = input.call
        if long.max_in_flight is not None and input.in_flight >= long.max_in_flight:
            return error_result(
                call,
                f"{spec.name} already has {input.in_flight} operations running (limit "
                f"{long.max_in_flight}); wait for one to finish (wait_for_operations) and retry",
            )
        if input.run_in_flight >= input.run_max_in_flight:
            return error_result(
                call,
                f"this run already has {input.run_in_flight} operations running (limit "
                f"{input.run_max_in_flight}); wait for one to finish (wait_for_operations)",
            )
        # Deterministic from the call, so a retried attempt asks for the same expiry and
        # mints the same token the external system may already hold.
        timeout = long.timeout
        if input.operation_timeout is not None:
            timeout = min(timeout, input.operation_timeout)
        info = activity.info()
        workflow_id = info.workflow_id or ""
        operation_id = info.activity_id
        expires_at = info.scheduled_time + timeout
        context = StartContext(
            idempotency_key=f"{workflow_id}/{call.id}", operation_id=operation_id
        )
        nonce_hash = None
        if long.completion == "callback":
            if self._tokens is None or not self._gateway_url:
                raise ApplicationError(
                    "callback tools need WAITSTATE_TOKEN_KEYS and GATEWAY_URL on the worker",
                    type=RUN_INPUT_INVALID,
                    non_retryable=True,
                )
            minted = self._tokens.mint(workflow_id, operation_id, expires_at, nonce=input.nonce)
            nonce_hash = minted.nonce_hash
            context = StartContext(
                idempotency_key=context.idempotency_key,
                operation_id=operation_id,
                callback_url=f"{self._gateway_url}/v1/operations/{operation_id}/complete",
                callback_token=minted.token,
            )
        try:
            job = await long.backend.start(args, context)
        except ToolError as err:
            return error_result(call, str(err))
        activity.metric_meter().create_counter(
            "waitstate_operations_started", "Long-tool jobs started"
        ).add(1, {"tool": spec.name})
        return ToolResult(
            tool_call_id=call.id,
            name=call.name,
            content="",
            operation=OperationStarted(
                job_id=job.job_id,
                completion=long.completion,
                mode=input.operation_mode or long.mode,
                expires_at=expires_at,
                eta_seconds=job.eta_seconds if job.eta_seconds is not None else _seconds(long.eta),
                poll_interval_seconds=long.poll_interval.total_seconds(),
                reconcile_seconds=long.reconcile_seconds(),
                nonce_hash=nonce_hash,
                input=long.input,
            ),
        )

    async def _by_reference(self, result: ToolResult) -> ToolResult:
        """Keep the run's history small: a result over 16 KB reaches the model as a preview
        and a `ref://blobs/...` it can read with read_ref; anything over 1 KB travels to the
        model-call activity by reference, so the history holds a preview, not the text twice.
        """
        # Owned by the run: a cleanup keeps what a run may still read (waitstate/blobs/owners.py).
        owner = activity.info().workflow_id
        try:
            text = await shrink(self._blobs, result.content, owner=owner)
        except BlobStoreUnavailable:
            # Too large for the history: the call fails as BLOB_STORE_UNAVAILABLE (the class's
            # name), retried by its policy, and the model is told if it never goes through.
            _store_error()
            raise
        if len(text.encode()) <= INLINE_RESULT_BYTES:
            result.content = text
            return result
        try:
            result.content_ref = await self._blobs.put(text.encode(), owner)
        except BlobStoreUnavailable:
            # The reference only spares the history a second copy of a result under the shrink
            # threshold: with the store out, it travels whole rather than be lost (and a tool
            # run again for it).
            _store_error()
            result.content = text
            return result
        head = text[:INLINE_PREVIEW_CHARS]
        tail = text.rsplit("\n", 1)[-1]
        # The reference line, if any, stays visible: the run offers read_ref when it sees one.
        result.content = f"{head}…\n{tail}" if REF_PREFIX in tail else f"{head}…"
        return result


def _store_error() -> None:
    activity.metric_meter().create_counter(
        "waitstate_blob_store_errors", "Activity attempts the blob store failed"
    ).add(1, {"activity": activity.info().activity_type})


def _seconds(value: timedelta | None) -> int | None:
    return int(value.total_seconds()) if value is not None else None


async def stubbed(spec: ToolSpec, args: BaseModel, call: ToolCall) -> ToolResult:
    """A fork's call under the `stub` policy: the tool's stub answers it (docs/forks.md); a tool
    with none, or a stub that raises, is told to the model, and nothing runs for real."""
    if spec.stub is None:
        return error_result(
            call,
            f"unavailable in this fork: {call.name} has no stub, and the recorded run made no "
            "such call; go on without it",
        )
    try:
        if inspect.iscoroutinefunction(spec.stub):
            answer = await spec.stub(args)
        else:  # the worker's loop goes on while it runs
            answer = await asyncio.to_thread(spec.stub, args)
            if inspect.isawaitable(answer):
                answer = await answer
    except Exception as err:  # the app's own code: told to the model, like a tool's error
        return error_result(call, f"{call.name}'s stub failed: {type(err).__name__}: {err}")
    content = answer if isinstance(answer, str) else json.dumps(answer, default=str)
    return ToolResult(tool_call_id=call.id, name=call.name, content=content)
