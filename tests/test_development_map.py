"""docs/development.md's map ("Layout") names every runtime file: each `.py` of the package,
`workflows/` and `activities/` included (the package reaches them through its links).

A file is named in the entry of the directory it sits in at the top of the map (`waitstate/`'s
modules in `waitstate/`'s block, `waitstate/mcp/tasks.py` in the `mcp/` entry, `workflows/`'s in
`workflows/`): as `name.py`, or, in a folder of its own within that entry (`routes/ (approvals,
questions, ...)`), by its name after the folder's. A package's `__init__.py` is named by its
entry, and its `__main__.py` by the `python -m` the entry shows.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs import page, section
from tests.helpers import package_files

ROOT = Path(__file__).resolve().parent.parent
# The links inside the package, and the top-level folders of the checkout they lead to.
LINKED = ("workflows", "activities")


def _blocks(text: str) -> dict[str, str]:
    """The map's entries by their top-level name (`waitstate/`, `workflows/`...), and, under
    `waitstate/`, its subpackages' entries (`waitstate/mcp/`), each with its continuation
    lines."""
    block = section(text, "## Layout").split("```", 2)[1]
    entries: dict[str, list[str]] = {}
    top = sub = ""
    for line in block.splitlines():
        if match := re.match(r"([\w.]+/?)\s", line + " "):
            top, sub = match[1], ""
            entries.setdefault(top, []).append(line)
            continue
        if top == "waitstate/" and (match := re.match(r"  ([\w.]+/)\s", line)):
            sub = f"waitstate/{match[1]}"
        entries.setdefault(sub or top, []).append(line)
        if sub:
            entries[top].append(line)
    return {name: "\n".join(lines) for name, lines in entries.items()}


def missing(text: str, files: list[Path], root: Path) -> list[str]:
    """The files (paths from the checkout's root, through the links) the map does not name."""
    blocks = _blocks(text)
    found = []
    for path in files:
        parts = path.relative_to(root).parts
        if parts[1] in LINKED:  # waitstate/workflows/x.py is the checkout's workflows/x.py
            parts = parts[1:]
        folder = "/".join(parts[:2]) + "/" if parts[0] == "waitstate" and len(parts) > 2 else ""
        entry = blocks.get(folder) if folder else blocks.get(f"{parts[0]}/")
        name = parts[-1]
        if entry is None:
            found.append("/".join(parts))
            continue
        if name == "__init__.py" and len(parts) <= 3:
            continue  # the entry itself names the package
        if name == "__main__.py":
            package = ".".join(
                ["waitstate", *parts[1:-1]] if parts[0] != "waitstate" else parts[:-1]
            )
            if f"python -m {package}" in entry:
                continue
            found.append("/".join(parts))
            continue
        inner = parts[2:-1] if parts[0] == "waitstate" else parts[1:-1]
        if inner:  # a folder within the entry: `routes/ (operations, approvals, ...)`
            after = entry.split(f"{inner[-1]}/", 1)
            stem = name.removesuffix(".py")
            if len(after) == 2 and (
                name == "__init__.py" or re.search(rf"\b{re.escape(stem)}\b", after[1])
            ):
                continue
        elif re.search(rf"(?<![\w/]){re.escape(name)}\b", entry):
            continue
        found.append("/".join(parts))
    return found


def test_the_map_names_every_runtime_file() -> None:
    files = package_files(ROOT)

    assert len(files) > 150  # the links followed: the workflows and activities are there
    assert not (unnamed := missing(page("docs/development.md"), files, ROOT)), "\n".join(
        ["docs/development.md's map does not name:", *unnamed]
    )


def test_the_check_finds_a_file_the_map_leaves_out(tmp_path: Path) -> None:
    text = (
        "\n## Layout\n\n```\n"
        "waitstate/    the package\n"
        "  settings.py   the environment\n"
        "  mcp/          servers.py (declarations),\n"
        "                tasks.py (tasks)\n"
        "  gateway/      (`python -m waitstate.gateway`): routes/ (approvals, threads)\n"
        "workflows/    agent_run.py\n"
        "```\n\n## Tests\n"
    )
    names = [
        "waitstate/__init__.py",
        "waitstate/settings.py",
        "waitstate/wording.py",
        "waitstate/mcp/__init__.py",
        "waitstate/mcp/servers.py",
        "waitstate/mcp/tasks.py",
        "waitstate/mcp/rounds.py",
        "waitstate/gateway/__main__.py",
        "waitstate/gateway/routes/__init__.py",
        "waitstate/gateway/routes/approvals.py",
        "waitstate/gateway/routes/inbox.py",
        "waitstate/workflows/agent_run.py",
        "waitstate/workflows/board.py",
    ]
    files = [tmp_path / name for name in names]

    assert missing(text, files, tmp_path) == [
        "waitstate/wording.py",
        "waitstate/mcp/rounds.py",
        "waitstate/gateway/routes/inbox.py",
        "workflows/board.py",
    ]
