"""Built-in tools: their names and argument models, in one place.

`get_operation_status`, `wait_for_operations` and `request_approval` are answered by the
workflow from its own state; `read_ref` reads slices of a result kept by reference (its
handler is `waitstate/tools/read_ref.py`). Workflows import these, so they stay pydantic-only.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

GET_OPERATION_STATUS = "get_operation_status"
WAIT_FOR_OPERATIONS = "wait_for_operations"
REQUEST_APPROVAL = "request_approval"
# Offered to runs whose operations may ask the model a question (waitstate/schemas/questions).
ANSWER_QUESTION = "answer_question"
# The tool that reads slices of results passed by reference, and the prefix of references
# (waitstate/blobs/ defines them; repeated here so workflows need not import it).
READ_REF = "read_ref"
# An MCP server's tools reach the model as `SERVER__TOOL` (waitstate/mcp/servers.py).
MCP_SEPARATOR = "__"
REF_PREFIX = "ref://blobs/"
# The built-ins every run with a long tool is offered, to check and wait for its operations.
BUILTIN_TOOLS = (GET_OPERATION_STATUS, WAIT_FOR_OPERATIONS)

READ_REF_DEFAULT_SLICE = 4_000
READ_REF_MAX_SLICE = 65_536


class GetOperationStatusArgs(BaseModel):
    """Arguments of the built-in `get_operation_status` tool."""

    operation_id: str = Field(description="The operation_id a long tool returned.")


class WaitForOperationsArgs(BaseModel):
    """Arguments of the built-in `wait_for_operations` tool."""

    operation_ids: list[str] = Field(
        default_factory=list,
        description="Operations to wait for; empty means every pending operation.",
    )
    timeout_seconds: int | None = Field(
        default=None, ge=1, description="Stop waiting after this long, even if some still run."
    )


class RequestApprovalArgs(BaseModel):
    """Arguments of the built-in `request_approval` tool."""

    action: str = Field(description="What you want to do, e.g. 'refund $420 for claim C-118'.")
    reason: str = Field(description="Why it is needed; the approver reads this.")


class ReadRefArgs(BaseModel):
    ref: str = Field(
        description=f"The reference a truncated result gave, copied exactly: "
        f"'{REF_PREFIX}' followed by 64 hex characters.",
    )
    offset: int = Field(
        default=0,
        ge=0,
        description="Where to start, in bytes from the start of the result; 0 is the start. "
        "To read on, use the previous offset plus the previous length.",
    )
    length: int = Field(
        default=READ_REF_DEFAULT_SLICE,
        ge=1,
        le=READ_REF_MAX_SLICE,
        description=f"How many bytes to read, 1 to {READ_REF_MAX_SLICE}.",
    )
