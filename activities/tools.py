"""The tool-call activity: runs a registered tool."""

from __future__ import annotations

from temporalio import activity

from schemas import ToolCallInput, ToolResult
from schemas.run import CALL_TOOL
from tools import ToolRegistry


class ToolActivities:
    """Tool calls, given the worker's tool registry."""

    def __init__(self, tools: ToolRegistry) -> None:
        self._tools = tools

    @activity.defn(name=CALL_TOOL)
    async def call_tool(self, input: ToolCallInput) -> ToolResult:
        """Run one tool call.

        Bad arguments come back as an error result for the model to correct; an unexpected
        exception propagates so the workflow's retry policy applies.
        """
        return await self._tools.run(input.call)
