"""What a server's tasks and tool results say, as an operation's: a task's state or a call's
result as a `Completion`, its elicitations as questions, and a person's answer as the server's
elicitation is answered. Plain functions over the SDK's types, tested without a server.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types
from mcp_types import CallToolResult

from waitstate.mcp.extension import TaskState
from waitstate.schemas.operations import Completion
from waitstate.schemas.questions import MAX_MESSAGE_CHARS, Question
from waitstate.tools.spec import JobAnswer

# The `_meta` key of an elicitation result that carries why the run declined on its own.
DECLINE_REASON_META = "io.waitstate/reason"
MAX_URL_CHARS = 2_000  # of a URL elicitation's address, as a person is shown it


def tool_result_text(result: CallToolResult) -> str:
    """The text of a tool result's content, or its structured content as JSON if it has no
    text (non-text blocks are named, not shown)."""
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        if text is not None:
            parts.append(str(text))
        else:
            kind = getattr(block, "type", "content")
            mime = getattr(block, "mime_type", None)
            parts.append(f"[{kind}{f' {mime}' if mime else ''} not shown]")
    has_text = any(getattr(block, "text", None) is not None for block in result.content)
    if not has_text and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)


def completion_of(state: TaskState) -> Completion:
    """A task's state as an operation's: `working` is `running` (its status message the
    progress), `completed` is `succeeded`, or `failed` when the tool's result is an error."""
    if state.status == "working":
        return Completion(status="running", progress=_short(state.status_message))
    if state.status == "input_required":
        return Completion(
            status="input_required",
            progress=_short(state.status_message),
            questions=questions_of(state.input_requests or {}) or None,
        )
    if state.status == "completed":
        return result_completion(state.result or {})
    if state.status == "cancelled":
        return Completion.failed("task_cancelled", f"task {state.task_id} was cancelled")
    message = (state.error or {}).get("message") or state.status_message or "the task failed"
    return Completion.failed("task_failed", str(message)[:2000])


def result_completion(result: dict[str, Any]) -> Completion:
    """A tool's result (a `CallToolResult`, as JSON) as an operation's end: `succeeded` with its
    structured content or text, or `failed` when it is an error."""
    parsed = CallToolResult.model_validate(result)
    text = tool_result_text(parsed)
    if parsed.is_error:
        return Completion.failed("tool_error", text[:2000])
    value: Any = parsed.structured_content if parsed.structured_content is not None else text
    return Completion(status="succeeded", result=value)


def questions_of(input_requests: dict[str, Any]) -> list[Question]:
    """A task's input requests as questions. Only elicitations (a form: a message and the
    schema of the answer) are questions; roots requests are answered from the server's
    declaration (`McpTaskBackend`), and sampling requests are left for the task's expiry."""
    questions = []
    for key, payload in input_requests.items():
        try:
            request = mcp_types.ElicitRequest.model_validate(payload)
        except ValueError:
            if (malformed := _malformed_elicitation(key, payload)) is not None:
                questions.append(malformed)
            continue
        # A form's message and schema, as the client received them (a URL elicitation has no
        # schema: its answer is an accept or a decline, once the person opened its address).
        params = request.model_dump(by_alias=True, mode="json", exclude_none=True)["params"]
        schema = params.get("requestedSchema") or {"type": "object", "properties": {}}
        message = str(params.get("message", ""))[:MAX_MESSAGE_CHARS]
        if params.get("mode") == "url" and params.get("url"):
            message = _with_url(message, str(params["url"]))
        questions.append(Question(key=key, message=message, requested_schema=schema))
    return questions


def _with_url(message: str, url: str) -> str:
    """A URL elicitation's message with its address, which the person must open (the server
    asks them to do something there: sign in, pay, consent) before they accept or decline. It
    is shown as text, never as a link the page follows: it came from the server."""
    address = f"\n\nOpen this address, then accept or decline: {url[:MAX_URL_CHARS]}"
    return message[: MAX_MESSAGE_CHARS - len(address)] + address


def _malformed_elicitation(key: str, payload: Any) -> Question | None:
    """An elicitation whose form is not one (its `requestedSchema` a list, a string, a schema
    of the wrong shape): asked all the same, so that the run refuses it with the reason and
    the task is told no at once, rather than left to wait for its expiry."""
    if not isinstance(payload, dict) or payload.get("method") != "elicitation/create":
        return None
    params = payload.get("params")
    params = params if isinstance(params, dict) else {}
    schema = params.get("requestedSchema")
    if not isinstance(schema, dict):
        schema = {"type": type(schema).__name__}  # refused: not an object's schema
    message = params.get("message")
    return Question(
        key=key,
        message=(message if isinstance(message, str) else "")[:MAX_MESSAGE_CHARS],
        requested_schema=schema,
    )


def _short(text: str | None) -> str | None:
    return text[:500] if text else None


def elicitation_response(answer: JobAnswer) -> dict[str, Any]:
    """An answer to a question as the server's elicitation is answered (an `ElicitResult`, as
    JSON)."""
    response: dict[str, Any] = {"action": answer.action}
    if answer.content is not None:
        response["content"] = answer.content
    if answer.reason is not None:
        # A decline the run made on its own (a question it refused): the reason, where an
        # elicitation result may carry more (`_meta`, under a prefix of ours).
        response["_meta"] = {DECLINE_REASON_META: answer.reason}
    return response
