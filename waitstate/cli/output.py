"""What the CLI prints, and how: what came from outside (jobs' questions, reviewers' names,
models' answers, tools' errors) with its control characters as escapes, one-line errors with
their exit status, and the lines and JSON shared by the commands."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, TextIO

from pydantic import ValidationError

from waitstate.client import Retry, TreeNode
from waitstate.schemas import RunState, Step, Usage
from waitstate.schemas.run import TERMINAL_STATUSES
from waitstate.wording import count_of

# The exit status when stdout's reader went away (`status | head -1`): SIGPIPE's, as a shell
# reports a process that signal ended.
READER_GONE = 141
# What a terminal would act on rather than show: C0 and C1 controls and DEL (escape sequences
# start with ESC or CSI), and the characters that reorder or hide text (bidi embeddings,
# overrides and isolates, line and paragraph separators). Tab and newline are kept by
# `visible`; `one_line` escapes newlines too.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_CONTROLS}]")
_CONTROL_OR_NEWLINE = re.compile(f"[{_CONTROLS}\n]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r"}


# How a run may end without the answer it was started for (failed, cancelled, approval_expired,
# output_invalid, budget_exceeded): `run --wait`, `watch` and `status` exit 1 for these (a run
# still going, or that answered or used its turns, is 0).
ENDED_WITHOUT_ANSWER = TERMINAL_STATUSES - {"completed", "max_turns"}


def run_exit_code(status: str) -> int:
    """The CLI's exit status for a run in `status`: 1 if it ended without its answer."""
    return 1 if status in ENDED_WITHOUT_ANSWER else 0


class CliError(Exception):
    """A one-line error for the user; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class VisibleText:
    """A text stream that writes what `visible` shows: what the CLI prints comes largely from
    outside, and the terminal must show it, never act on it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(visible(text))

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty...: the stream's own
        return getattr(self._stream, name)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with its control characters as escapes (ESC is `\\x1b`); tabs and newlines
    kept."""
    return _CONTROL.sub(_escape, text)


def one_line(text: str) -> str:
    """`text` on one line: its newlines and control characters as escapes, so what came from
    outside cannot pass for lines of the CLI's own."""
    return _CONTROL_OR_NEWLINE.sub(_escape, text)


def reader_gone() -> int:
    """Stdout's reader went away (`status | head -1`): say nothing more, and exit as a
    process that SIGPIPE ended."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # what is still buffered goes nowhere, quietly
    os.close(devnull)
    return READER_GONE


def has_controls(text: str) -> bool:
    """Whether `text` holds a newline or a control character (what `one_line` escapes)."""
    return _CONTROL_OR_NEWLINE.search(text) is not None


def checked_id(given: str | None, flag: str, new: Callable[[], str], what: str) -> str:
    """An id flag's value (`--id`, `--thread`), checked, or `new()` when it is not given.

    Raises:
        CliError: it is empty, has spaces around it, or control characters in it (code 2).
    """
    if given is None:
        return new()
    if not given.strip():
        raise CliError(f"{flag} is empty: give {what} id, or leave {flag} out for a new one", 2)
    if given != given.strip() or has_controls(given):
        raise CliError(f"{flag} {given!r} has spaces around it or control characters in it", 2)
    return given


def invalid(what: str, err: ValidationError) -> CliError:
    """The error for input pydantic refused: each field and why, on one line (code 2)."""
    problems = "; ".join(
        f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in err.errors()
    )
    return CliError(f"not a valid {what}: {problems}", 2)


def preview(text: str, limit: int = 60) -> str:
    """The start of a text, on one line."""
    line = " ".join(text.split())
    return line if len(line) <= limit else f"{line[: limit - 3]}..."


def retry_line(retry: Retry) -> str:
    """E.g. `model call retrying: attempt 3 of 8, last error: openai: HTTP 500: ...`."""
    of = f" of {retry.maximum_attempts}" if retry.maximum_attempts else ""
    error = one_line(retry.last_error)
    return f"{retry.call} retrying: attempt {retry.attempt}{of}, last error: {error}"


def step_line(step: Step) -> str:
    """A run's step, e.g. `  turn 2   tool  start_export: {...}`."""
    mark = " (error)" if step.is_error else ""
    return (
        f"  turn {step.turn:<3} {step.kind:<5} {one_line(step.name)}{mark}: {one_line(step.detail)}"
    )


def when(moment: datetime | None, absent: str | None = "-") -> str | None:
    """A moment in ISO 8601, or `absent` when there is none."""
    return moment.isoformat() if moment is not None else absent


def tokens_line(usage: Usage) -> str:
    """Input (and what of it a prompt cache served or took) and output tokens."""
    cache = []
    if usage.cached_input_tokens:
        cache.append(f"{usage.cached_input_tokens} cached")
    if usage.cache_write_input_tokens:
        cache.append(f"{usage.cache_write_input_tokens} written to cache")
    cached = f" ({', '.join(cache)})" if cache else ""
    return f"{usage.input_tokens} input{cached} + {count_of(usage.output_tokens, 'output token')}"


def tree_line(node: TreeNode) -> str:
    """A node of a run's tree, indented by its depth: its name and agent, how it stands, what
    it waits for and what it spent itself."""
    name = node.path.rsplit("/", 1)[-1]
    line = f"{'  ' * node.depth}{name} [{node.agent or 'run'}] {node.status}"
    if node.waiting_for not in (None, "none") and node.status == "waiting":
        line += f" for {node.waiting_for}"
    if node.open_requests:
        line += f" ({count_of(node.open_requests, 'open request')}: decide it with its run id {node.run_id})"
    if node.usage is not None:
        line += f"; {count_of(node.usage.model_calls, 'model call')}, {tokens_line(node.usage)}"
    return one_line(line)


def usage_line(state: RunState) -> str:
    """A run's model calls and tokens, and what it spent of its budget, if it has one."""
    usage = state.usage
    line = f"usage: {count_of(usage.model_calls, 'model call')}, {tokens_line(usage)}"
    budget = state.budget
    if budget is not None:
        line += f"; budget: {budget.line()}"
        if budget.raised:
            line += f" (raised {budget.raised}×)"
        if budget.degraded_to:
            line += f", went on with {budget.degraded_to}"
        if budget.exceeded:
            line += ", exceeded"
    return line


def print_outcome(state: RunState) -> None:
    """How a run ended: its status and counts, its answer, its rejected answer, its error."""
    tokens = state.usage.input_tokens + state.usage.output_tokens
    counts = (
        count_of(state.turns, "turn"),
        count_of(state.tool_calls, "tool call"),
        count_of(state.usage.model_calls, "model call"),
        count_of(tokens, "token"),
    )
    print(f"{state.status} after {', '.join(counts)}")
    if state.final_output is not None:
        print(f"answer: {state.final_output}")
    print_rejected(state)
    if state.error:
        print(f"error: {one_line(state.error)}")


def print_rejected(state: RunState) -> None:
    """The last answer the agent's output type refused, while no later one validated."""
    if (rejected := state.rejected_output) is not None:
        print(f"rejected answer (turn {rejected.turn}): {rejected.answer}")
        print(f"  why: {rejected.errors}")


def print_json(value: Any) -> None:
    """`value` as JSON on one line."""
    print(json.dumps(value, indent=None, default=str))
