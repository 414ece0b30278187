"""AgentRunWorkflow: one agent run, from task to answer, as a Temporal workflow."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from schemas import (
        Message,
        ModelCallInput,
        ModelResponse,
        RunInput,
        RunResult,
        RunState,
        RunStatus,
        Step,
        ToolCall,
        ToolCallInput,
        ToolResult,
    )
    from schemas.errors import (
        MODEL_REQUEST_REJECTED,
        MODEL_SPEC_INVALID,
        RUN_FAILED,
        RUN_INPUT_INVALID,
    )
    from schemas.run import CALL_MODEL, CALL_TOOL
    from workflows.search_attributes import AGENT_STATUS

# Provider SDKs never retry on their own (max_retries=0): this policy owns every attempt.
# A provider's retry-after reaches it as the ApplicationError's next_retry_delay.
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=8,
    non_retryable_error_types=[MODEL_REQUEST_REJECTED, MODEL_SPEC_INVALID, RUN_INPUT_INVALID],
)
# A sync tool that keeps failing is reported to the model, which can try something else.
TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=3,
)
PREVIEW_CHARS = 160


@workflow.defn
class AgentRunWorkflow:
    """Calls the model, runs the tools it asks for, and repeats until an answer or max_turns."""

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        self._input = input
        self._state = RunState(task=input.task, model=input.model)
        self._messages: list[Message] = [Message(role="user", content=input.task)]

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        self._set_status("running")
        try:
            while self._state.turns < input.max_turns:
                reply = await self._call_model()
                if not reply.tool_calls:
                    return await self._finish("completed", reply.content)
                await self._run_tools(reply.tool_calls)
            return await self._finish("max_turns", None)
        except (asyncio.CancelledError, ActivityError) as err:
            if is_cancelled_exception(err):
                self._set_status("cancelled")
            raise

    @workflow.query
    def status(self) -> RunState:
        """Where the run is: status, turns, tool calls, usage and every step so far."""
        return self._state

    async def _call_model(self) -> Message:
        turn = self._state.turns + 1
        try:
            response: ModelResponse = await workflow.execute_activity(
                CALL_MODEL,
                ModelCallInput(
                    model=self._input.model,
                    system_prompt=self._input.system_prompt,
                    messages=self._messages,
                    tools=self._input.tools,
                    turn=turn,
                ),
                result_type=ModelResponse,
                start_to_close_timeout=self._input.model_timeout,
                retry_policy=MODEL_RETRY,
                summary=f"model {self._input.model} turn {turn}",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            reason = str(err.cause) if err.cause else str(err)
            self._state.error = reason
            self._set_status("failed")
            raise ApplicationError(
                f"model call failed on turn {turn}: {reason}", type=RUN_FAILED, non_retryable=True
            ) from err
        self._state.turns = turn
        self._state.usage += response.usage
        reply = response.message
        self._messages.append(reply)
        names = ", ".join(call.name for call in reply.tool_calls)
        detail = f"calls {names}" if reply.tool_calls else _preview(reply.content)
        self._state.steps.append(
            Step(turn=turn, kind="model", name=self._input.model, detail=detail)
        )
        return reply

    async def _run_tools(self, calls: list[ToolCall]) -> None:
        # Calls of one turn are independent by construction: the model issued them together.
        results = await asyncio.gather(*(self._run_tool(call) for call in calls))
        for result in results:
            self._messages.append(
                Message(
                    role="tool",
                    content=result.content,
                    tool_call_id=result.tool_call_id,
                    name=result.name,
                    is_error=result.is_error,
                )
            )
            self._state.steps.append(
                Step(
                    turn=self._state.turns,
                    kind="tool",
                    name=result.name,
                    detail=_preview(result.content),
                    is_error=result.is_error,
                )
            )
        self._state.tool_calls += len(calls)

    async def _run_tool(self, call: ToolCall) -> ToolResult:
        if call.name not in self._input.tools:
            # The run decides which tools exist for it, not the model.
            allowed = ", ".join(self._input.tools) or "none"
            return ToolResult(
                tool_call_id=call.id,
                name=call.name,
                content=f"unknown tool {call.name!r}; available: {allowed}",
                is_error=True,
            )
        try:
            result: ToolResult = await workflow.execute_activity(
                CALL_TOOL,
                ToolCallInput(call=call, workflow_id=workflow.info().workflow_id),
                result_type=ToolResult,
                start_to_close_timeout=self._input.tool_timeout,
                retry_policy=TOOL_RETRY,
                summary=f"tool {call.name}",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            reason = str(err.cause) if err.cause else str(err)
            return ToolResult(
                tool_call_id=call.id,
                name=call.name,
                content=f"tool {call.name} failed: {reason}",
                is_error=True,
            )
        return result

    async def _finish(self, status: RunStatus, output: str | None) -> RunResult:
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._state.final_output = output
        self._set_status(status)
        return RunResult(
            status=status,
            final_output=output,
            turns=self._state.turns,
            tool_calls=self._state.tool_calls,
            usage=self._state.usage,
        )

    def _set_status(self, status: RunStatus) -> None:
        self._state.status = status
        # AgentStatus filters the Web UI's list; skip the upsert (a history event) when the
        # starter already set the same value.
        current = workflow.info().typed_search_attributes.get(AGENT_STATUS)
        if current != status:
            workflow.upsert_search_attributes([AGENT_STATUS.value_set(status)])


def _preview(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"
