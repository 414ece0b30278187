"""Tool declarations and implementations."""

from tools.builtin import builtin_tools
from tools.demo import demo_tools
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
    "demo_tools",
]
