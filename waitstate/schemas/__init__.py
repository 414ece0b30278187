"""Pydantic types shared by workflows, activities, the CLI and tests (no Temporal imports)."""

from waitstate.schemas.messages import Message, ModelResponse, ToolCall, ToolDefinition, Usage
from waitstate.schemas.run import (
    DEFAULT_SYSTEM_PROMPT,
    TERMINAL_STATUSES,
    ModelCallInput,
    RejectedOutput,
    RunInput,
    RunResult,
    RunState,
    RunStatus,
    Step,
    ToolCallInput,
    ToolResult,
)

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "TERMINAL_STATUSES",
    "Message",
    "ModelCallInput",
    "RejectedOutput",
    "ModelResponse",
    "RunInput",
    "RunResult",
    "RunState",
    "RunStatus",
    "Step",
    "ToolCall",
    "ToolCallInput",
    "ToolDefinition",
    "ToolResult",
    "Usage",
]
