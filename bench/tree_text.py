"""The strings figure 11's trees move, the same on both sides: the lead's fan-out read from its
task, each child's task, each leaf's answer and the lead's answer. Plain functions, so the
floor imports no agent code."""

from __future__ import annotations

import re
from collections.abc import Sequence

_FAN = re.compile(r"fan=(\d+)")


def fan_of(task: str) -> int:
    """The children a lead's task asks for (`fan=N`; 1 if it says none)."""
    found = _FAN.search(task)
    return int(found.group(1)) if found else 1


def part_task(task: str, part: int) -> str:
    """A child's task: its parent's and the part's number."""
    return f"{task} > part {part}"


def leaf_answer(task: str) -> str:
    """A leaf's answer to `task`."""
    return f"notes on {task.split(' > ')[-1]}"


def combined(answers: Sequence[str]) -> str:
    """The lead's answer once its children answered."""
    return f"combined {len(answers)}: {list(answers)}"
