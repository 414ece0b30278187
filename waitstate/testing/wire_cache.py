"""The wire server's prompt cache: it remembers the prefixes of the requests it served and says
how much of a later request's prompt it had seen, as the providers' usage reports it
(`waitstate.testing.wire_server` turns it on with `prompt_cache=True`).

A prompt is a sequence of segments, in the order the provider reads it: tools, then the system
prompt (or `instructions`), then each message (Anthropic: each content block of each message;
a string content is one text block). A segment's tokens are estimated as its JSON's characters
over 4, so the counts are deterministic. What is kept, for the life of the server:

- Anthropic: the prefixes up to each cache breakpoint (`cache_control`), within the request's
  model; a request reads the longest kept prefix that ends at one of its breakpoints or at most
  20 blocks before one, as the API looks back, and writes those up to its breakpoints past it.
  `input_tokens` is then the rest, as Anthropic counts it.
- OpenAI (Chat Completions, Responses): every prefix of every request, automatically, within the
  request's model and `prompt_cache_key`; a request reads the longest it shares with one seen
  before. Its input counts the cached tokens too, and none are reported written.

Prefixes under `min_tokens` are neither kept nor read (the real minimum is 1,024 tokens).
There is no expiry, and no routing: a request with the same prefix and key always hits.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4
# How far back from a breakpoint Anthropic looks for a prefix it kept, in blocks.
LOOKBACK_BLOCKS = 20
USES_KEPT = 1_000


@dataclass(frozen=True)
class CacheUse:
    """What one request's prompt was: its estimated tokens, and of them, those read from the
    cache and those written to it."""

    total: int
    read: int = 0
    written: int = 0


@dataclass(frozen=True)
class _Segment:
    value: Any
    breakpoint: bool = False


class PromptCache:
    """The prefixes seen, by digest (of the scope and the segments up to a boundary)."""

    def __init__(self, min_tokens: int = 0) -> None:
        self.min_tokens = min_tokens
        self._kept: set[str] = set()
        self._lock = threading.Lock()
        # What the latest requests were served, oldest first (for tests and the bench to read).
        self.uses: deque[CacheUse] = deque(maxlen=USES_KEPT)

    def use(self, protocol: str, body: dict[str, Any]) -> CacheUse:
        """Serve the request `body` of `protocol` from the cache, and keep what it leaves."""
        model = str(body.get("model"))
        if protocol == "anthropic":
            segments = _anthropic_segments(body)
            scope: list[Any] = ["anthropic", model]
        else:
            segments = _openai_segments(protocol, body)
            scope = [protocol, model, body.get("prompt_cache_key")]
        ends, digests = _prefixes(scope, segments)
        total = ends[-1] if ends else 0
        with self._lock:
            if protocol == "anthropic":
                used = self._anthropic(segments, ends, digests, total)
            else:
                used = self._automatic(ends, digests, total)
            self.uses.append(used)
            return used

    def _anthropic(
        self, segments: list[_Segment], ends: list[int], digests: list[str], total: int
    ) -> CacheUse:
        marks = [i for i, segment in enumerate(segments) if segment.breakpoint]
        found = -1
        for mark in marks:
            for i in range(mark, max(mark - LOOKBACK_BLOCKS, -1), -1):
                if digests[i] in self._kept:
                    found = max(found, i)
                    break
        read = ends[found] if found >= 0 else 0
        written = 0
        for mark in marks:
            if mark > found and ends[mark] >= self.min_tokens:
                self._kept.add(digests[mark])
                written = ends[mark] - read
        return CacheUse(total, read, written)

    def _automatic(self, ends: list[int], digests: list[str], total: int) -> CacheUse:
        read = 0
        for end, digest in zip(ends, digests, strict=True):
            if end < self.min_tokens:
                continue
            if digest in self._kept:
                read = end
            self._kept.add(digest)
        return CacheUse(total, read)


def _prefixes(scope: list[Any], segments: list[_Segment]) -> tuple[list[int], list[str]]:
    """For each segment, the tokens up to its end and the digest of the prefix it ends."""
    running = hashlib.sha256(json.dumps(scope).encode())
    ends, digests, tokens = [], [], 0
    for segment in segments:
        text = json.dumps(segment.value, sort_keys=True)
        running.update(text.encode())
        tokens += -(-len(text) // CHARS_PER_TOKEN)
        ends.append(tokens)
        digests.append(running.copy().hexdigest())
    return ends, digests


def _unmarked(value: Any) -> _Segment:
    """A segment of a tool or block, its breakpoint noted and left out of what it is."""
    if isinstance(value, dict) and "cache_control" in value:
        rest = {k: v for k, v in value.items() if k != "cache_control"}
        return _Segment(rest, breakpoint=True)
    return _Segment(value)


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else [content]


def _anthropic_segments(body: dict[str, Any]) -> list[_Segment]:
    segments = [_unmarked(tool) for tool in body.get("tools") or []]
    if (system := body.get("system")) is not None:
        segments += [_unmarked(block) for block in _blocks(system)]
    for message in body.get("messages") or []:
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else message
        for block in _blocks(content):
            segment = _unmarked(block)
            segments.append(_Segment([role, segment.value], segment.breakpoint))
    return segments


def _openai_segments(protocol: str, body: dict[str, Any]) -> list[_Segment]:
    segments = [_Segment(tool) for tool in body.get("tools") or []]
    if protocol == "openai":
        return segments + [_Segment(message) for message in body.get("messages") or []]
    if (instructions := body.get("instructions")) is not None:
        segments.append(_Segment(instructions))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    return segments + [_Segment(item) for item in items or []]
