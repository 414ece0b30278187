"""The table the suite prints: one row per fault class and per invariant."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from chaos.model import Check

_MAX_LISTED = 20
_OUTCOME_WIDTH = 90  # longer outcomes go on continuation lines


def table(checks: Sequence[Check]) -> str:
    """The rows, aligned, then every violation (the first few per row) so failures reproduce."""
    headers = ("check", "attempts", "outcome", "violations")
    rows: list[tuple[str, str, str, str]] = []
    for c in checks:
        first, *more = textwrap.wrap(c.outcome, _OUTCOME_WIDTH) or [""]
        rows.append((c.name, str(c.attempts), first, str(len(c.violations))))
        rows += [("", "", f"  {line}", "") for line in more]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(
            cell[: widths[i]].ljust(widths[i]) if i != 1 and i != 3 else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        )

    out = [line(headers), "-+-".join("-" * w for w in widths), *(line(r) for r in rows)]
    for check in checks:
        if check.violations:
            out.append(f"\nviolations of {check.name!r}:")
            out += [f"  - {v}" for v in check.violations[:_MAX_LISTED]]
            if len(check.violations) > _MAX_LISTED:
                out.append(f"  ... and {len(check.violations) - _MAX_LISTED} more")
    return "\n".join(out)
