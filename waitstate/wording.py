"""How amounts are worded for people, wherever a run's steps, refusals or the CLI state them: a
time span as a person says it (`2.3 s`, `5 min 12 s`, `30 days`), not Python's `0:00:02.282201`
or `30 days, 0:00:00`; a count with its noun in the singular or the plural (`1 tool call`,
`2 tool calls`). Pure: the workflow words its steps with it too."""

from __future__ import annotations

from datetime import timedelta

# A span is said in its two largest units at most: `1 day 2 h`, not `1 day 2 h 3 min 4 s`.
_UNITS = (("day", 86_400), ("h", 3_600), ("min", 60), ("s", 1))


def span(delta: timedelta) -> str:
    """`delta` as a person says it: under a minute in seconds (`2.3 s`, `0.05 s`, `45 s`),
    longer in its two largest units (`5 min 12 s`, `1 h 30 min`, `30 days`, `1 day 2 h`)."""
    seconds = delta.total_seconds()
    if seconds < 0:
        return f"-{span(-delta)}"
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 59.5:
        return f"{round(seconds)} s"
    left = round(seconds)
    parts = []
    for name, size in _UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append(count_of(count, name) if name == "day" else f"{count} {name}")
        elif parts:
            break  # `1 h 5 s` would skip the minutes: one unit is enough then
        if len(parts) == 2:
            break
    return " ".join(parts)


def count_of(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and its noun, singular for 1 (`1 tool call`), else plural (`2 tool calls`,
    `0 tool calls`; `plural` where adding an `s` is not it)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
