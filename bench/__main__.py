"""Benchmarks against a raw-Temporal floor: prints a table and writes docs/benchmarks.md.

    python -m bench                      # every figure, 3 repetitions (make bench)
    python -m bench --quick --out /tmp/b.md   # tiny sizes, for the smoke test
    python -m bench --only 3 --reps 1 --scale 10000 --sides ours   # the issue's 10,000

Both sides run against one dev server (SQLite file, WAL, the tuning of `make up`) on free
ports, each side's worker in a process of its own; see docs/benchmarks.md for the method.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shlex
import signal
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.a2a import figure14
from bench.caching import figure8
from bench.events import figure7
from bench.figures import FIGURES, QUICK, Row, Sizes
from bench.forks import FORKS_AT_ONCE, figure13
from bench.notices import figure10
from bench.procs import ROOT, machine
from bench.rates import figure9
from bench.stack import Stack
from bench.tree_cancel import figure12
from bench.trees import figure11
from waitstate.settings import exit_process

# Figures 7, 9, 11 to 13 live in modules of their own (the gateway's readers; the model queue's
# limit; agent trees; forks), beside the others.
EVERY_FIGURE = {**FIGURES, 7: figure7, 9: figure9, 11: figure11, 12: figure12, 13: figure13}
# Figures that need no services: the stack is not started for them alone.
STACKLESS = {8: figure8, 10: figure10, 14: figure14}
ALL_FIGURES = sorted({*EVERY_FIGURE, *STACKLESS})
MARKER = "<!-- Everything below is written by `python -m bench`. -->"
DEFAULT_OUT = ROOT / "docs" / "benchmarks.md"


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each figure")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--scale", type=int, help="N suspended runs of figure 3 (1000)")
    parser.add_argument(
        "--scale-reps", type=int, help="N of figure 3's repetitions after the first (300)"
    )
    parser.add_argument("--idle", type=float, help="seconds of figure 3's idle window (30)")
    parser.add_argument(
        "--sides", default="ours,floor", choices=["ours,floor", "ours", "floor"],
        help="measure both sides (default) or one",
    )  # fmt: skip
    parser.add_argument(
        "--only", default=",".join(map(str, ALL_FIGURES)),
        help="figures to run, e.g. 1,3 (their rows replace theirs in --out's table)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the markdown to write")
    args = parser.parse_args(argv)
    args.figures = sorted({int(part) for part in args.only.split(",") if part.strip()})
    if not set(args.figures) <= set(ALL_FIGURES) or args.reps < 1:
        parser.error(f"--only takes figure numbers 1-{ALL_FIGURES[-1]}; --reps at least 1")
    return args


def sizes_for(args: argparse.Namespace) -> Sizes:
    """The default or quick sizes, with the flags' overrides."""
    sizes = QUICK if args.quick else Sizes()
    overrides = {
        "scale": args.scale,
        "scale_reps": args.scale_reps,
        "idle_seconds": args.idle,
        "sides": tuple(args.sides.split(",")),
    }
    return dataclasses.replace(sizes, **{k: v for k, v in overrides.items() if v is not None})


def _fmt(value: float) -> str:
    if value == int(value) or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _spread(values: list[float]) -> str:
    if not values:
        return "–"
    middle = _fmt(statistics.median(values))
    if len(values) == 1 or min(values) == max(values):
        return middle
    return f"{middle} ({_fmt(min(values))}–{_fmt(max(values))})"


def table(rows: list[Row]) -> list[list[str]]:
    """Header and one line per row: figure, metric, ours, floor, ratio, target, verdict."""
    lines = [["fig", "metric", "ours: median (min–max)", "floor", "ours/floor", "target", "met"]]
    for row in rows:
        verdict = {True: "met", False: "MISSED", None: ""}[row.met]
        lines.append(
            [
                row.figure,
                f"{row.metric} [{row.unit}]",
                _spread(row.ours),
                _spread(row.floor),
                f"{row.ratio:.2f}×" if row.ratio is not None else "",
                row.target,
                verdict,
            ]
        )
    return lines


def text_table(lines: list[list[str]]) -> str:
    """Aligned columns for a terminal."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    rendered = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                for line in lines]  # fmt: skip
    rendered.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(rendered)


def markdown(lines: list[list[str]]) -> str:
    """A GitHub table."""
    out = ["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(lines[0])]
    out += [
        "| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines[1:]
    ]
    return "\n".join(out)


def write_doc(path: Path, body: str) -> None:
    """Replace what follows MARKER in `path`, keeping the hand-written method above it."""
    head = DEFAULT_HEAD
    if path.exists() and MARKER in (text := path.read_text()):
        head = text.split(MARKER, 1)[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{head.rstrip()}\n\n{MARKER}\n\n{body}\n")


DEFAULT_HEAD = "# Benchmarks\n\nSee `bench/` for the method."


async def run(args: argparse.Namespace) -> int:
    """Start the stack, run the chosen figures, print and write the results."""
    sizes = sizes_for(args)
    command = "python -m bench " + shlex.join(sys.argv[1:])

    def log(line: str) -> None:
        print(line, flush=True)

    log(f"machine: {machine()}")
    log(f"sizes: {sizes}, reps {args.reps}")
    # SIGTERM cancels the bench like ^C does, so the `finally` below stops every process.
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    began = time.monotonic()
    rows: list[Row] = []
    timings: list[str] = []
    shared = sizes.sides if args.quick else ()
    stack: Stack | None = None
    try:
        for number in args.figures:
            log(f"figure {number}...")
            figure_began = time.monotonic()
            if number in STACKLESS:
                rows += await STACKLESS[number](sizes, args.reps, log)
            else:
                if stack is None:
                    stack = await Stack.start(sizes.pipeline_seconds, shared=shared)
                rows += await EVERY_FIGURE[number](stack, sizes, args.reps, log)
            timings.append(f"figure {number}: {time.monotonic() - figure_began:.0f} s")
            log(f"figure {number} took {time.monotonic() - figure_began:.0f} s")
    finally:
        if stack is not None:
            await stack.close()
    lines = table(rows)
    total = time.monotonic() - began
    print()
    print(text_table(lines))
    print(f"\nmachine: {machine()}; took {total:.0f} s ({', '.join(timings)})")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    measured = (
        f"Measured {stamp} with `{command.strip()}` on {machine()}; "
        f"{args.reps} repetition(s); the whole bench took {total:.0f} s "
        f"({', '.join(timings)})."
    )
    sized = f"Sizes: {_describe(sizes, args.reps, args.figures)}"
    write_doc(args.out, results(args.out, args.figures, [measured, sized], lines))
    print(f"wrote {args.out}")
    # A missed target is a finding, not a failure: the table says so. Errors raise.
    return 0


def results(path: Path, figures: list[int], said: list[str], lines: list[list[str]]) -> str:
    """What goes below MARKER in `path` once `figures` ran (`said`: when, how, at what sizes;
    `lines`: their table): that alone for every figure; for some, their rows replace theirs in
    the table `path` has, whose other rows and paragraphs stay."""
    earlier = _results(path) if figures != ALL_FIGURES else None
    table = markdown(lines)
    if earlier is None:
        return "\n\n".join(["## Results", *said, table])
    paragraphs, rows = earlier
    paragraphs = [p for p in paragraphs if not set(_figures_said(p)) <= set(figures)]
    rows = [row for row in rows if _figure_of(row) not in figures]
    merged = sorted([*rows, *table.splitlines()[2:]], key=_figure_of)
    numbers = ",".join(map(str, figures))
    return "\n\n".join(
        [
            "## Results",
            *paragraphs,
            f"Figures {numbers}: {' '.join(said)}",
            "\n".join([*table.splitlines()[:2], *merged]),
        ]
    )


def _results(path: Path) -> tuple[list[str], list[str]] | None:
    """What `path` says below MARKER: its paragraphs before the table (without the heading),
    and the table's rows; None if it has no table there."""
    if not path.exists() or MARKER not in (text := path.read_text()):
        return None
    below = text.split(MARKER, 1)[1].strip()
    paragraphs = [p for p in below.split("\n\n") if p.strip() and p.strip() != "## Results"]
    tables = [p for p in paragraphs if p.startswith("| fig |")]
    if not tables:
        return None
    rows = tables[-1].splitlines()[2:]
    return [p for p in paragraphs if not p.startswith("| ")], rows


def _figures_said(paragraph: str) -> list[int]:
    """The figures a paragraph of an earlier `--only` run is about (`Figures 1,3: ...`); none
    for any other paragraph (an empty list is a subset of any: those are told apart here)."""
    if not paragraph.startswith("Figures "):
        return [-1]
    numbers = paragraph.removeprefix("Figures ").split(":", 1)[0].split(",")
    return [int(n) for n in numbers if n.strip().isdigit()] or [-1]


def _figure_of(row: str) -> int:
    """The figure number of a markdown table row (`| 3 (N=1,000, 1 rep) | ...`)."""
    cell = row.strip().strip("|").split("|", 1)[0].strip()
    digits = cell.split()[0] if cell else ""
    return int(digits) if digits.isdigit() else 0


def _describe(sizes: Sizes, reps: int, figures: list[int]) -> str:
    scale = f"{sizes.scale:,} suspended runs"
    if reps > 1 and sizes.scale_reps != sizes.scale:
        scale += f" once, then {sizes.scale_reps:,} for the other {reps - 1} repetitions"
    parts = {
        1: f"figure 1: {sizes.warmup} warm-up, {sizes.sequential} sequential runs, then "
        f"{sizes.concurrent} runs at most 50 in flight, per side and repetition",
        2: f"figure 2: {sizes.resume} resumes per side and repetition",
        3: f"figure 3: {scale} per side, {sizes.idle_seconds:g} s idle window",
        4: f"figure 4: a {sizes.pipeline_seconds:g} s pipeline job polled every second",
        5: f"figure 5: {', '.join(map(str, sizes.turns))} turns",
        6: f"figure 6: a conversation of {sizes.messages} messages per side and repetition",
        7: f"figure 7: {sizes.event_steps_runs} runs read three ways, then "
        f"{sizes.event_runs} live threads with 10 readers each",
        8: f"figure 8: a conversation of {sizes.cache_messages} messages per provider and "
        "repetition, with and without caching",
        9: f"figure 9: {sizes.rate_runs} runs of one model call each, started at once, through "
        "a model queue limited to 5 calls/s and polled by one worker process, then by two",
        10: f"figure 10: {sizes.notice_samples} runs awaiting an MCP task per way of waking "
        "and repetition",
        11: f"figure 11: a lead's turn fanning out to {sizes.tree_children} sub-agents (floor: "
        "child workflows) at once, after a warm-up tree of 2, per side and repetition",
        12: f"figure 12: {sizes.cancel_trials} trees of {sizes.cancel_children} children waiting "
        "for approvals, cancelled, per repetition (ours alone)",
        13: f"figure 13: {sizes.fork_runs} recorded runs forked {FORKS_AT_ONCE} at once by the "
        "client, then through one evaluation, per repetition (ours alone)",
        14: f"figure 14: {sizes.a2a_calls} runs calling a remote A2A agent (the JavaScript "
        "SDK's server) per way of waking and repetition",
    }
    return "; ".join(parts[number] for number in figures) + "."


if __name__ == "__main__":
    exit_process(asyncio.run(run(parse(sys.argv[1:]))))
