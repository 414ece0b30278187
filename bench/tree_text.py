"""The strings figure 11's trees move, the same on both sides: each child's task, each leaf's
answer and the lead's answer. Plain functions, so the floor imports no agent code."""

from __future__ import annotations

from collections.abc import Sequence


def part_task(task: str, part: int) -> str:
    """A child's task: its parent's and the part's number."""
    return f"{task} > part {part}"


def leaf_answer(task: str) -> str:
    """A leaf's answer to `task`."""
    return f"notes on {task.split(' > ')[-1]}"


def combined(answers: Sequence[str]) -> str:
    """The lead's answer once its children answered."""
    return f"combined {len(answers)}: {list(answers)}"
