"""The documentation the tests hold to its word: README.md and the pages under docs/, read as
a reader meets them (headings, links, the files a page shows), never by line number."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = "README.md"


def page(path: str) -> str:
    """The text of one page, by its path from the repository's root."""
    return (ROOT / path).read_text()


def pages() -> dict[str, str]:
    """README.md and every page under docs/, by path."""
    paths = [README, *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
    return {path: page(path) for path in paths}


def between(text: str, start: str, end: str) -> str:
    """The text from `start` to the next `end`, both of which must be there."""
    assert start in text, f"the page says nothing of {start!r}"
    return text.split(start, 1)[1].split(end, 1)[0]


def section(text: str, heading: str) -> str:
    """A `## ` section's text, up to the next `## ` heading."""
    return between(text, f"\n{heading}\n", "\n## ")


def files_shown(text: str) -> dict[str, str]:
    """The files a text shows as `<!-- file: PATH -->` over a Python block, by path."""
    found = re.findall(r"<!-- file: (\S+) -->\n```python\n(.*?)```", text, re.DOTALL)
    return dict(found)


def prose(text: str) -> str:
    """The text outside fenced code blocks (where a `#` starts a comment, not a heading)."""
    return re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.DOTALL | re.MULTILINE)


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them: lower case, punctuation dropped,
    spaces as hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", prose(text), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def links(text: str) -> list[str]:
    """The page's links to other pages or anchors (not to the web), as written."""
    targets = re.findall(r"\]\(([^)\s]+)\)", prose(text))
    return [t for t in targets if not re.match(r"[a-z]+://|mailto:", t)]
