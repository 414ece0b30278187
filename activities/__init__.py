"""Activities: thin adapters from providers and tools to Temporal."""

from activities.agents import AgentActivities
from activities.approvals import ApprovalActivities
from activities.background import BackgroundActivities
from activities.cleanup import CleanupActivities
from activities.mcp import McpActivities
from activities.model import ModelActivities
from activities.operations import OperationActivities
from activities.tools import ToolActivities

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
