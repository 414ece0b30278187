"""Untrusted JSON values, measured and named: whether one is within limits of depth, size and
kind (found without recursion, and without reading past the first excess), and how a refusal
names what it refuses and quotes it, cut short. `waitstate.elicitation` checks a job's
questions and their answers with them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

# Past these an integer is refused (JSON numbers of 64 bits at most).
_INT_LIMIT = 2**64
# What a refusal quotes is cut to this length.
_QUOTE_CHARS = 120


@dataclass(frozen=True)
class Limits:
    """How deep, how many values and how many characters (as JSON, about) a value may be."""

    depth: int
    nodes: int
    chars: int


def oversized(value: object, limits: Limits) -> str | None:
    """What makes `value` too large or not JSON (None: within `limits`), found without
    recursion and without reading past the first excess."""
    pending: list[tuple[object, int]] = [(value, 1)]
    nodes, chars = 1, 0
    while pending:
        item, depth = pending.pop()
        children: list[object] = []
        if isinstance(item, Mapping):
            if depth >= limits.depth and item:
                return f"nested deeper than {limits.depth} levels"
            for key in item:
                if not isinstance(key, str):
                    return "not JSON (an object's key is not a string)"
                chars += len(key) + 3
            children = list(item.values()) if len(item) <= limits.nodes else []
            nodes += len(item)
        elif isinstance(item, list):
            if depth >= limits.depth and item:
                return f"nested deeper than {limits.depth} levels"
            children, nodes = item, nodes + len(item)
        elif isinstance(item, str):
            chars += len(item) + 2
        elif isinstance(item, bool) or item is None:
            chars += 5
        elif isinstance(item, int):
            if not -_INT_LIMIT < item < _INT_LIMIT:
                return "holding an integer beyond 64 bits"
            chars += 20
        elif isinstance(item, float):
            if not math.isfinite(item):
                return "holding a number that is not finite"
            chars += 24
        else:
            return f"not JSON ({kind_of(item)})"
        if nodes > limits.nodes:
            return f"over {limits.nodes} values"
        if chars > limits.chars:
            return f"over {limits.chars} characters"
        pending.extend((child, depth + 1) for child in children)
    return None


def kind_of(value: object) -> str:
    """What a refusal calls a value: `null`, `a boolean`, `a number`, `a list`..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def quote(value: object) -> str:
    """A value as a refusal quotes it: its repr, cut short."""
    try:
        text = repr(value)
    except ValueError:  # an integer too long to print
        text = kind_of(value)
    return cut(text)


def cut(text: str, limit: int = _QUOTE_CHARS) -> str:
    """`text`, or its start and its length when it is over `limit` characters."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"
