"""waitstate: a durable runtime for AI agents whose tools run for minutes, hours or days.

What an app may rely on is listed here; anything else (`waitstate.schemas`, `waitstate.gateway`,
`waitstate.blobs`...) is the runtime's own and may change.

    from waitstate import Agent, App, RunContext, tool

Names load on first use, so a workflow importing `waitstate.schemas` pulls in no client,
provider or HTTP code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from waitstate.agents import Agent, App
    from waitstate.apps import AppError
    from waitstate.client import WaitstateClient
    from waitstate.mcp import McpServer
    from waitstate.providers.base import Provider, ProviderError
    from waitstate.providers.scripted import SCRIPTED_BANNER, Script
    from waitstate.schemas.approvals import ApprovalPolicy
    from waitstate.schemas.evals import EvalCase, Score
    from waitstate.schemas.messages import Message, ModelResponse, ToolCall, ToolDefinition, Usage
    from waitstate.schemas.operations import Completion, CompletionMode, OperationError, ResultMode
    from waitstate.schemas.questions import InputPolicy, Question, QuestionPolicy
    from waitstate.schemas.run import RunInput, RunResult, RunState
    from waitstate.settings import run_program
    from waitstate.tools.function import RunContext, tool
    from waitstate.tools.spec import (
        AnswersQuestions,
        Job,
        JobAnswer,
        LongSpec,
        LongTool,
        StartContext,
        ToolError,
        ToolSpec,
    )

_EXPORTS = {
    "Agent": "waitstate.agents",
    "App": "waitstate.agents",
    "AppError": "waitstate.apps",
    "WaitstateClient": "waitstate.client",
    "McpServer": "waitstate.mcp",
    "Provider": "waitstate.providers.base",
    "ProviderError": "waitstate.providers.base",
    "SCRIPTED_BANNER": "waitstate.providers.scripted",
    "Script": "waitstate.providers.scripted",
    "ApprovalPolicy": "waitstate.schemas.approvals",
    "EvalCase": "waitstate.schemas.evals",
    "Score": "waitstate.schemas.evals",
    "Message": "waitstate.schemas.messages",
    "ModelResponse": "waitstate.schemas.messages",
    "ToolCall": "waitstate.schemas.messages",
    "ToolDefinition": "waitstate.schemas.messages",
    "Usage": "waitstate.schemas.messages",
    "Completion": "waitstate.schemas.operations",
    "CompletionMode": "waitstate.schemas.operations",
    "OperationError": "waitstate.schemas.operations",
    "ResultMode": "waitstate.schemas.operations",
    "InputPolicy": "waitstate.schemas.questions",
    "QuestionPolicy": "waitstate.schemas.questions",
    "Question": "waitstate.schemas.questions",
    "RunInput": "waitstate.schemas.run",
    "RunResult": "waitstate.schemas.run",
    "RunState": "waitstate.schemas.run",
    "RunContext": "waitstate.tools.function",
    "tool": "waitstate.tools.function",
    "AnswersQuestions": "waitstate.tools.spec",
    "Job": "waitstate.tools.spec",
    "JobAnswer": "waitstate.tools.spec",
    "LongSpec": "waitstate.tools.spec",
    "LongTool": "waitstate.tools.spec",
    "StartContext": "waitstate.tools.spec",
    "ToolError": "waitstate.tools.spec",
    "ToolSpec": "waitstate.tools.spec",
    "run_program": "waitstate.settings",
}

__all__ = [
    "Agent",
    "AnswersQuestions",
    "App",
    "AppError",
    "ApprovalPolicy",
    "Completion",
    "CompletionMode",
    "EvalCase",
    "InputPolicy",
    "Job",
    "JobAnswer",
    "LongSpec",
    "LongTool",
    "McpServer",
    "Message",
    "ModelResponse",
    "OperationError",
    "Provider",
    "ProviderError",
    "Question",
    "QuestionPolicy",
    "ResultMode",
    "RunContext",
    "RunInput",
    "RunResult",
    "RunState",
    "SCRIPTED_BANNER",
    "Score",
    "Script",
    "StartContext",
    "ToolCall",
    "ToolDefinition",
    "ToolError",
    "ToolSpec",
    "Usage",
    "WaitstateClient",
    "run_program",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'waitstate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
