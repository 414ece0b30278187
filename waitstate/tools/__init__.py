"""Tool declarations (ToolSpec, LongSpec, ToolRegistry), the built-in tools and read_ref."""

from waitstate.tools.builtin import builtin_tools
from waitstate.tools.spec import (
    Job,
    LongSpec,
    LongTool,
    StartContext,
    ToolError,
    ToolKind,
    ToolRegistry,
    ToolSpec,
)

__all__ = [
    "Job",
    "LongSpec",
    "LongTool",
    "StartContext",
    "ToolError",
    "ToolKind",
    "ToolRegistry",
    "ToolSpec",
    "builtin_tools",
]
