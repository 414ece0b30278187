"""The table the suite prints: one row per fault class and per invariant."""

from __future__ import annotations

from collections.abc import Sequence

from chaos.model import Check

_MAX_LISTED = 20


def table(checks: Sequence[Check]) -> str:
    """The rows, aligned, then every violation (the first few per row) so failures reproduce."""
    headers = ("check", "attempts", "outcome", "violations")
    rows = [(c.name, str(c.attempts), c.outcome, str(len(c.violations))) for c in checks]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    widths[2] = min(widths[2], 90)

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
