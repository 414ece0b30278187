"""Provider-neutral conversation types: what every model adapter speaks."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class ToolCall(BaseModel):
    """A tool call the model asked for."""

    id: str = Field(description="Provider-issued call id, echoed back with the result.")
    name: str
    arguments: str = Field(
        default="{}",
        description="The arguments as the model wrote them: raw JSON text, possibly malformed.",
    )


class ProviderItems(BaseModel):
    """Items of the provider that answered, opaque to everything else: what it needs sent back
    with its own message on the next call (an OpenAI Responses reasoning model's reasoning
    items, Anthropic's thinking blocks). Only the provider and model that gave them are sent them; any other ignores them."""

    provider: str = Field(description="The name of the provider that answered.")
    model: str = Field(description="The model asked, as the run's model spec names it.")
    items: list[dict[str, Any]] = Field(description="The items, as the provider gave them.")


class Message(BaseModel):
    """One message of a conversation, independent of any provider's wire format."""

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = Field(
        default=None, description="For role 'tool': the call answered."
    )
    name: str | None = Field(default=None, description="For role 'tool': the tool's name.")
    is_error: bool = Field(default=False, description="For role 'tool': the result is an error.")
    content_ref: str | None = Field(
        default=None,
        description="The full content, stored by reference; `content` is then a preview. The "
        "model-call activity reads it back, so a result is in the run's history only once.",
    )
    provider_items: ProviderItems | None = Field(
        default=None,
        description="For role 'assistant': what the provider that answered needs back with "
        "this message (e.g. reasoning items), sent to it only; kept in the stored transcript, "
        "never in the run's history. Histories from before it decode without it.",
    )


class ToolDefinition(BaseModel):
    """A tool as a model sees it: name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


class Usage(BaseModel):
    """Token usage of one or more model calls.

    `input_tokens` counts the whole prompt, whatever of it the provider's prompt cache served
    (as OpenAI counts it; Anthropic's own `input_tokens` leaves cache reads and writes out, and
    its adapter adds them back): it means the same for every provider. Of those,
    `cached_input_tokens` were read from the cache (billed at a discount) and
    `cache_write_input_tokens` written to it (Anthropic bills them above the base price); the
    rest is uncached input. Histories from before the cache fields decode with 0.
    """

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            model_calls=self.model_calls + other.model_calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_input_tokens=self.cache_write_input_tokens + other.cache_write_input_tokens,
        )

    def __sub__(self, other: Usage) -> Usage:
        """What was used since `other`, an earlier total of the same calls."""
        return Usage(
            model_calls=self.model_calls - other.model_calls,
            input_tokens=self.input_tokens - other.input_tokens,
            output_tokens=self.output_tokens - other.output_tokens,
            cached_input_tokens=self.cached_input_tokens - other.cached_input_tokens,
            cache_write_input_tokens=self.cache_write_input_tokens - other.cache_write_input_tokens,
        )


class ModelResponse(BaseModel):
    """What a provider returns for one model call."""

    message: Message
    usage: Usage
    stop_reason: str = ""
    model: str = Field(default="", description="The model that answered, as the provider names it.")
    transcript_ref: str | None = Field(
        default=None, description="The conversation including this reply, stored by reference."
    )
    output_error: str | None = Field(
        default=None,
        description="The final answer does not validate against the agent's output type: why, "
        "for the model to correct.",
    )
    background_id: str | None = Field(
        default=None,
        description="Set when the reply is not given yet: the id of the background response "
        "the provider is working on (a model spec's `?background`); the run waits for it "
        "(`await_model_response`), and `message` and `usage` are empty meanwhile.",
    )
