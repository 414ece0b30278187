"""The workflows a worker serves, which `waitstate replay-check` replays histories on: the worker
(`waitstate/worker.py`) and the CLI import them from here.
"""

from .agent_run import AgentRunWorkflow
from .blob_cleanup import BlobCleanupWorkflow
from .evals import EvalWorkflow

WORKFLOWS: tuple[type, ...] = (AgentRunWorkflow, BlobCleanupWorkflow, EvalWorkflow)
