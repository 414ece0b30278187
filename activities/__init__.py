"""Activities: thin adapters from providers and tools to Temporal."""

from .agents import AgentActivities
from .approvals import ApprovalActivities
from .background import BackgroundActivities
from .cleanup import CleanupActivities
from .evals import EvalActivities
from .mcp import McpActivities
from .model import ModelActivities
from .operations import OperationActivities
from .pushes import PushActivities
from .tools import ToolActivities
from .trees import TreeActivities

__all__ = [
    "AgentActivities",
    "ApprovalActivities",
    "BackgroundActivities",
    "CleanupActivities",
    "McpActivities",
    "ModelActivities",
    "OperationActivities",
    "PushActivities",
    "ToolActivities",
    "TreeActivities",
    "EvalActivities",
]
