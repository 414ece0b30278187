"""An evaluation's report as files: Markdown for people (a pull request's comment, a review) and
JSON for programs (a CI step that reads the verdict). Pure functions over `EvalReport`; the CLI
writes them (`waitstate eval`), the gateway serves the JSON beside its page.

Everything a report holds from runs (tasks, answers, tool names, structured fields, scorers'
details, errors, run ids) is untrusted: in Markdown it is escaped where it sits in a table or a
line, and set in fences longer than any backtick run it holds where it is shown whole, so no
answer can add a column, a heading, a link or raw HTML to the report.
"""

from __future__ import annotations

import json
import re
from typing import Any

from waitstate.schemas import Usage
from waitstate.schemas.evals import EvalInput, EvalReport, EvalRow

# Characters that would reorder or hide text (controls, bidi overrides), shown as escapes.
_HIDDEN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)
# What Markdown reads as markup within a line or a table's cell, escaped with a backslash (what
# it reads as markup only at a line's start never is there: a value is always after a label).
_MARKUP = re.compile(r"([\\`*_\[\]<>|~&#])")
_NEWLINES = re.compile(r"\r\n|\r|\n")
_BACKTICKS = re.compile(r"`+")
# What a cell shows of a value at most (the per-run sections show answers whole).
CELL_CHARS = 300


def report_markdown(report: EvalReport) -> str:
    """The report as Markdown: what was changed and the verdict, a table of the runs, then each
    run's answers side by side, its changed fields, its tool calls, its scores and its error."""
    parts = [_header(report), _summary(report)]
    parts += [_run_section(row) for row in report.rows]
    return "\n\n".join(parts) + "\n"


def report_json(report: EvalReport) -> str:
    """The report as JSON: its fields, with the verdict computed (`passed`, the runs that
    passed; `pass_rate`; `holds`) and each row's `same_tools`, for a script to read."""
    data: dict[str, Any] = report.model_dump(mode="json")
    data |= {"passed": report.passed, "pass_rate": report.pass_rate, "holds": report.holds}
    for row, shown in zip(report.rows, data["rows"], strict=True):
        shown["same_tools"] = row.same_tools
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def changes(given: EvalInput) -> list[tuple[str, str]]:
    """What an evaluation changes in each fork, as (what, value) pairs; none for a re-run
    with the recorded settings (a determinism check)."""
    changed = [("model", given.model), ("agent", given.agent)]
    if given.instructions is not None:
        lines = given.instructions.strip().splitlines() or [""]
        more = " ..." if len(lines) > 1 else ""
        changed.append(("instructions", f"{lines[0]}{more}"))
    return [(what, value) for what, value in changed if value is not None]


def verdict(report: EvalReport) -> str:
    """The verdict in words: running (with how far), holds, or does not hold."""
    if not report.done:
        return f"running: {len(report.rows)} of {len(report.input.runs)} runs scored"
    return "holds" if report.holds else "does not hold"


def inline(value: object, limit: int = CELL_CHARS) -> str:
    """`value` as Markdown text in a line or a table's cell: cut to `limit` characters, its
    hidden characters as escapes, its markup escaped, its line breaks as `<br>`."""
    shown = str(value)
    if len(shown) > limit:
        shown = f"{shown[:limit]}... ({len(shown)} characters)"
    shown = _HIDDEN.sub(lambda match: f"\\u{ord(match.group()):04x}", shown)
    lines = _NEWLINES.split(_MARKUP.sub(r"\\\1", shown))
    return "<br>".join(lines)


def fenced(value: str) -> str:
    """`value` whole, as a fenced block no backtick run in it can close."""
    shown = _HIDDEN.sub(lambda match: f"\\u{ord(match.group()):04x}", value)
    longest = max((len(run) for run in _BACKTICKS.findall(shown)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{shown}\n{fence}"


def _header(report: EvalReport) -> str:
    given = report.input
    changed = ", ".join(f"{what} {inline(value)}" for what, value in changes(given))
    scorers = inline(", ".join(given.scorers)) if given.scorers else "all of the app's"
    listed = f" (listed by the query {inline(given.query)})" if given.query else ""
    lines = [
        f"# Evaluation {inline(report.eval_id)}",
        "",
        f"- changed: {changed or 'nothing (a re-run with the recorded settings)'}",
        f"- forked at turn {given.at}, tool calls answered: {given.policy}",
        f"- runs: {len(given.runs)}{listed}",
        f"- scorers: {scorers}",
        f"- pass rate: {report.passed} of {len(report.rows)} ({report.pass_rate:.0%}), "
        f"threshold {given.threshold:.0%}",
        f"- verdict: **{verdict(report)}**",
    ]
    return "\n".join(lines)


def _summary(report: EvalReport) -> str:
    lines = [
        "| run | status | verdict | same tools | tokens | cost |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in report.rows:
        status = f"{inline(row.original_status or '-')} → {inline(row.new_status or '-')}"
        used = f"{tokens(row.original_usage)} → {tokens(row.new_usage)}"
        cost = f"{dollars(row.original_cost)} → {dollars(row.new_cost)}"
        same = "yes" if row.same_tools else "no"
        lines.append(
            f"| {inline(row.run_id)} | {status} | {_passed(row)} | {same} | {used} | {cost} |"
        )
    if not report.rows:
        lines.append("| (none scored yet) | | | | | |")
    return "## Runs\n\n" + "\n".join(lines)


def _run_section(row: EvalRow) -> str:
    parts = [
        f"## {inline(row.run_id)}: {_passed(row)}",
        f"Task: {inline(row.task)}  \nFork: {inline(row.fork_id)}",
    ]
    if row.error is not None:
        parts.append(f"Error: {inline(row.error, 2000)}")
    parts.append(
        f"Original answer ({inline(row.original_status or '-')}):\n\n"
        f"{_answer(row.original_answer)}\n\n"
        f"New answer ({inline(row.new_status or '-')}):\n\n{_answer(row.new_answer)}"
    )
    if row.fields:
        fields = ["| field | original | new |", "| --- | --- | --- |"]
        fields += [
            f"| {inline(change.field)} | {_value(change.original)} | {_value(change.new)} |"
            for change in row.fields
        ]
        parts.append("Changed fields:\n\n" + "\n".join(fields))
    same = "the same" if row.same_tools else "different"
    parts.append(
        f"Tool calls ({same}):\n\n- original: {_tools(row.original_tools)}\n"
        f"- new: {_tools(row.new_tools)}"
    )
    if row.scores:
        scores = [
            f"- {inline(score.name)}: {'pass' if score.passed else 'fail'}"
            + (f": {inline(score.detail, 2000)}" if score.detail else "")
            for score in row.scores
        ]
        parts.append("Scores:\n\n" + "\n".join(scores))
    return "\n\n".join(parts)


def _passed(row: EvalRow) -> str:
    return "pass" if row.passed else "FAIL"


def _answer(answer: str | None) -> str:
    return "(none)" if answer is None else fenced(answer)


def _tools(names: list[str]) -> str:
    return " → ".join(inline(name) for name in names) if names else "none"


def _value(value: object) -> str:
    """A structured field's value in a cell: as JSON (absent: a dash)."""
    if value is None:
        return "-"
    return inline(json.dumps(value, ensure_ascii=False, default=str))


def tokens(usage: Usage) -> str:
    """A run's tokens, input and output, as people read them (`1,234`)."""
    return f"{usage.input_tokens + usage.output_tokens:,}"


def dollars(cost: float | None) -> str:
    """A run's cost (`$0.0123`), or a dash where its model is not priced."""
    return "-" if cost is None else f"${cost:.4f}"
