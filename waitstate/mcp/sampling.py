"""A server's sampling requests (`sampling/createMessage`), answered by the model of the run
that called it, within what the operator allows the server (`McpServer(sampling=...)`).

A sampling request comes in a task's or a call's input requests, from outside the process: it
is read as hostile. Only text is answered; the prompt is only the server's own messages (the
run's conversation is never shown to it, whatever `includeContext` asks); an answer is at most
the policy's tokens; a poll answers at most `max_requests`; a prompt over `max_prompt_chars`
is refused. A refused request is left open, and the call waits for it until it expires.

Imported only by workers.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import mcp_types
from pydantic import ValidationError

from waitstate.mcp.rounds import split_question_key
from waitstate.mcp.servers import SamplingPolicy
from waitstate.providers.base import ModelSettings, Provider
from waitstate.schemas import Message, Usage
from waitstate.schemas.questions import MAX_MESSAGE_CHARS, Question

log = logging.getLogger("waitstate.mcp.sampling")

SAMPLING = "sampling/createMessage"
# How each provider says an answer stopped at its token limit (Chat Completions, Messages,
# the Responses API).
TOKEN_LIMIT_STOPS = frozenset({"length", "max_tokens", "max_output_tokens"})


# A person's leave for the run's model to answer a sampling request (`SamplingPolicy.approval`):
# a question of the call, keyed by this prefix and the request's key.
ALLOW = "allow-sampling:"
ALLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"allow": {"type": "boolean", "title": "Let the run's model answer"}},
    "required": ["allow"],
}
PREVIEW_CHARS = 600  # of the prompt, in the question


def allow_question(key: str, request: dict[str, Any], server: str, max_tokens: int) -> Question:
    """The question a person answers before the run's model answers the sampling request
    `key`: what the server asks the model, and whether to let it."""
    try:
        params = mcp_types.CreateMessageRequest.model_validate(request).params
    except ValidationError:
        prompt = "(a request that is not well-formed: it would not be answered)"
    else:
        blocks = [
            block
            for message in params.messages
            for block in (
                message.content if isinstance(message.content, list) else [message.content]
            )
        ]
        prompt = " / ".join(b.text for b in blocks if isinstance(b, mcp_types.TextContent))
    if len(prompt) > PREVIEW_CHARS:
        prompt = prompt[:PREVIEW_CHARS] + "…"
    message = (
        f"MCP server {server} asks the run's model to write (at most {max_tokens} tokens): "
        f"{prompt!r}. Let it answer?"
    )
    return Question(
        key=ALLOW + key, message=message[:MAX_MESSAGE_CHARS], requested_schema=ALLOW_SCHEMA
    )


def allow_key(key: str) -> str | None:
    """The sampling request a question's key asks leave for (after a round's prefix, for a
    call's rounds), or None for any other question."""
    parsed = split_question_key(key)
    asked = parsed[1] if parsed is not None else key
    return asked.removeprefix(ALLOW) if asked.startswith(ALLOW) else None


def decision_name(job_id: str, question_key: str) -> str:
    """The record of a person's decision on a sampling request (written once: the first
    decision stands)."""
    job = hashlib.sha256(job_id.encode()).hexdigest()[:32]
    key = hashlib.sha256(question_key.encode()).hexdigest()[:32]
    return f"sampling/{job}/{key}"


def is_sampling(request: Any) -> bool:
    """Whether an input request is a sampling request."""
    return isinstance(request, dict) and request.get("method") == SAMPLING


class SamplingRefused(ValueError):
    """A sampling request the policy does not answer: why, in a line."""


class Sampler:
    """Answers sampling requests with `model` (of `provider`), within `policy`, and counts
    what the answers cost (`usage`). One per poll of a call: `max_requests` bounds its answers,
    and a request seen again (a server that has not taken the answer yet) gets the same answer
    without asking the model again.
    """

    def __init__(self, provider: Provider, model: str, policy: SamplingPolicy, server: str) -> None:
        self._provider, self._model, self._server = provider, model, server
        self.policy = policy
        self._answers: dict[str, dict[str, Any]] = {}
        self.usage = Usage()

    async def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """The `CreateMessageResult` (as JSON) for `request`.

        Raises:
            SamplingRefused: the request is malformed, asks for more than text, is too long,
                or the poll has answered all it may.
            ProviderError: the model could not answer (the next poll tries again).
        """
        digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        if (known := self._answers.get(digest)) is not None:
            return known
        if len(self._answers) >= self.policy.max_requests:
            raise SamplingRefused(
                f"{self.policy.max_requests} sampling requests answered in this poll already"
            )
        system_prompt, messages = self._prompt(request)
        params = request.get("params") or {}
        asked = params.get("maxTokens")
        limit = self.policy.max_tokens
        max_tokens = min(asked, limit) if isinstance(asked, int) and asked > 0 else limit
        temperature = params.get("temperature")
        settings = ModelSettings(
            temperature=float(temperature) if isinstance(temperature, int | float) else None,
            max_tokens=max_tokens,
        )
        response = await self._provider.complete(self._model, system_prompt, messages, [], settings)
        self.usage += response.usage.model_copy(update={"model_calls": 1})  # one call
        stop = "maxTokens" if response.stop_reason in TOKEN_LIMIT_STOPS else "endTurn"
        result = mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text=response.message.content),
            model=response.model or self._model,
            stop_reason=stop,
        )
        answer = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        self._answers[digest] = answer
        log.info(
            "MCP server %r: sampling request answered by %s (%d tokens in, %d out)",
            self._server,
            self._model,
            response.usage.input_tokens,
            response.usage.output_tokens,
        )
        return answer

    def _prompt(self, request: dict[str, Any]) -> tuple[str, list[Message]]:
        """The request's system prompt and messages, text only and within the policy.

        Raises:
            SamplingRefused: not a sampling request, content other than text, or too long.
        """
        try:
            params = mcp_types.CreateMessageRequest.model_validate(request).params
        except ValidationError:
            raise SamplingRefused("not a well-formed sampling/createMessage request") from None
        if params.tools:
            raise SamplingRefused("a sampling request with tools is not answered")
        messages = []
        for message in params.messages:
            blocks = message.content if isinstance(message.content, list) else [message.content]
            texts = [block.text for block in blocks if isinstance(block, mcp_types.TextContent)]
            if len(texts) != len(blocks):
                raise SamplingRefused("only text is answered (the request has other content)")
            messages.append(Message(role=message.role, content="\n".join(texts)))
        system_prompt = params.system_prompt or ""
        size = len(system_prompt) + sum(len(m.content) for m in messages)
        if not messages or size > self.policy.max_prompt_chars:
            raise SamplingRefused(
                f"a prompt of {size} characters (answered: 1 to {self.policy.max_prompt_chars})"
            )
        return system_prompt, messages
