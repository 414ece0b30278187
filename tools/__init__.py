"""Tool declarations and implementations."""

from tools.demo import demo_tools
from tools.spec import ToolError, ToolKind, ToolRegistry, ToolSpec

__all__ = ["ToolError", "ToolKind", "ToolRegistry", "ToolSpec", "demo_tools"]
