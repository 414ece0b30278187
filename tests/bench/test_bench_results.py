"""`python -m bench --only N` merges its figures' rows into the results table it writes: the
other figures' rows and paragraphs stay, a figure run again replaces its own."""

from __future__ import annotations

from pathlib import Path

from bench.__main__ import ALL_FIGURES, MARKER, results, write_doc

HEADER = ["fig", "metric", "ours: median (min–max)", "floor", "ours/floor", "target", "met"]


def _line(figure: str, metric: str, ours: str) -> list[str]:
    return [figure, metric, ours, "–", "", "", ""]


def test_some_figures_replace_their_rows_and_keep_the_others(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    out.write_text(f"# Benchmarks\n\nThe method.\n\n{MARKER}\n")
    every = [HEADER, _line("1", "cpu [ms]", "17"), _line("3 (N=1,000)", "rss [MB]", "123")]
    write_doc(out, results(out, list(range(1, 9)), ["Measured then.", "Sizes: all."], every))

    for ours in ("0.2", "0.18"):  # run twice: the second replaces the first
        eight = [HEADER, _line("8", "billed [tokens]", ours)]
        write_doc(out, results(out, [8], ["Measured now.", "Sizes: 8."], eight))

    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nThe method.")
    below = text.split(MARKER, 1)[1]
    assert "Measured then." in below and "Sizes: all." in below
    assert below.count("Figures 8: Measured now. Sizes: 8.") == 1
    rows = [line for line in below.splitlines() if line.startswith("| ") and "fig" not in line]
    assert rows == [
        "| 1 | cpu [ms] | 17 | – |  |  |  |",
        "| 3 (N=1,000) | rss [MB] | 123 | – |  |  |  |",
        "| 8 | billed [tokens] | 0.18 | – |  |  |  |",
    ]


def test_every_figure_writes_the_table_afresh(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    write_doc(out, results(out, [8], ["Before."], [HEADER, _line("8", "billed", "1")]))

    write_doc(out, results(out, ALL_FIGURES, ["After."], [HEADER, _line("1", "cpu", "2")]))

    below = out.read_text().split(MARKER, 1)[1]
    assert "Before." not in below and "| 8 |" not in below and "| 1 | cpu | 2 |" in below
