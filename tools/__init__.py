"""Tool declarations (ToolSpec, LongSpec, ToolRegistry), the built-in tools and read_ref."""

from tools.builtin import builtin_tools
from tools.spec import (
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
