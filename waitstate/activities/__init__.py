"""Activities: thin adapters from providers and tools to Temporal."""

from waitstate.activities.agents import AgentActivities
from waitstate.activities.approvals import ApprovalActivities
from waitstate.activities.background import BackgroundActivities
from waitstate.activities.cleanup import CleanupActivities
from waitstate.activities.mcp import McpActivities
from waitstate.activities.model import ModelActivities
from waitstate.activities.operations import OperationActivities
from waitstate.activities.tools import ToolActivities

__all__ = [
    "AgentActivities",
    "ApprovalActivities",
    "BackgroundActivities",
    "CleanupActivities",
    "McpActivities",
    "ModelActivities",
    "OperationActivities",
    "ToolActivities",
]
