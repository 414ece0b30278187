"""Anthropic's extended thinking on the wire server: the `thinking` and `redacted_thinking`
blocks its replies carry, signed, and the checks a request that thinks must pass, as Anthropic
makes them (`waitstate.testing.wire_server` serves them).

A thinking block's signature is an HMAC of its text under the server's own key, and a redacted
block's data carries one of its payload, so a block changed on its way back no longer verifies.
With thinking on (`"thinking": {"type": "enabled", ...}`), a request is refused (400,
`invalid_request_error`, in Anthropic's words) when

- a thinking block of any assistant message does not verify (`Invalid signature`);
- it comes back from a round of tool calls (its last message holds `tool_result` blocks) and the
  last assistant message does not start with a thinking block;
- that message's thinking blocks are not, in order, those this server sent with its tool calls.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any

THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
# Tests and the server share the key: the signatures are checked, not secret.
_KEY = b"waitstate-wire-server-thinking"


def signature(text: str) -> str:
    """The signature the server gives a thinking block of `text`."""
    digest = hmac.new(_KEY, text.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def thinking_blocks(
    thinking: str | None = None, redacted: str | None = None
) -> list[dict[str, Any]]:
    """The blocks a reply starts with: a thinking block of `thinking`, signed, then a
    redacted_thinking block whose opaque data holds `redacted`, signed (each only if given)."""
    blocks: list[dict[str, Any]] = []
    if thinking is not None:
        blocks.append({"type": "thinking", "thinking": thinking, "signature": signature(thinking)})
    if redacted is not None:
        data = base64.b64encode(redacted.encode()).decode()
        blocks.append({"type": "redacted_thinking", "data": f"{data}.{signature(data)}"})
    return blocks


def thinks(body: Mapping[str, Any]) -> bool:
    """Whether the request turns extended thinking on."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def thinking_problem(
    body: Mapping[str, Any], sent: Mapping[str, Sequence[dict[str, Any]]]
) -> str | None:
    """Why Anthropic would refuse this request for its thinking blocks, or None.

    Args:
        body: The request's body.
        sent: The thinking blocks this server sent with each tool call, by its tool_use id.
    """
    if not thinks(body):
        return None
    raw = body.get("messages")
    messages = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for place, block in enumerate(_blocks(message)):
            if block.get("type") in THINKING_TYPES and not _verifies(block):
                kind = block.get("type")
                return f"messages.{index}.content.{place}: Invalid `signature` in `{kind}` block"
    if not messages or not any(b.get("type") == "tool_result" for b in _blocks(messages[-1])):
        return None
    at = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if at is None:
        return None
    blocks = _blocks(messages[at])
    first = blocks[0].get("type") if blocks else None
    if first not in THINKING_TYPES:
        return (
            f"messages.{at}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
            f"found `{first}`. When `thinking` is enabled, a final `assistant` message must "
            "start with a thinking block (preceeding the lastmost set of `tool_use` and "
            "`tool_result` blocks). We recommend you include thinking blocks from previous "
            "turns. To avoid this requirement, disable `thinking`."
        )
    given = [_strip(b) for b in blocks if b.get("type") in THINKING_TYPES]
    for block in blocks:
        expected = sent.get(block.get("id", "")) if block.get("type") == "tool_use" else None
        if expected is not None and given != [_strip(b) for b in expected]:
            return (
                f"messages.{at}: the thinking blocks sent back are not those that came with "
                f"tool call {block.get('id')}"
            )
    return None


def sent_with_calls(reply: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A reply's thinking blocks by the id of each tool call it makes (none if it thought
    nothing or calls nothing)."""
    content = reply.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    thought = [b for b in blocks if b.get("type") in THINKING_TYPES]
    if not thought:
        return {}
    return {b["id"]: thought for b in blocks if b.get("type") == "tool_use" and "id" in b}


def _verifies(block: dict[str, Any]) -> bool:
    if block.get("type") == "thinking":
        text, signed = block.get("thinking"), block.get("signature")
        if not isinstance(text, str) or not isinstance(signed, str):
            return False
        return hmac.compare_digest(signed, signature(text))
    data = block.get("data")
    payload, _, signed = data.rpartition(".") if isinstance(data, str) else ("", "", "")
    return bool(payload) and hmac.compare_digest(signed, signature(payload))


def _strip(block: dict[str, Any]) -> dict[str, Any]:
    # A cache breakpoint the client put on the block is no change to it.
    return {key: value for key, value in block.items() if key != "cache_control"}


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
