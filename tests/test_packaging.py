"""Installing the project claims no generic top-level name a user's own project would have."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Names a user's project is likely to have for itself; the project keeps them inside `waitstate`.
GENERIC = {"tools", "schemas", "settings", "examples", "gateway", "blobs", "providers"}


def _layout_names() -> set[str]:
    """The top-level names of the README's layout block (`name/` or `name.py` at column 0)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    return {match[1] for match in re.finditer(r"^([a-z_]+)(?:/|\.py)\s", block, re.MULTILINE)}


def test_install_adds_only_waitstate_and_what_the_readme_layout_names(tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
         "--disable-pip-version-check", "--target", str(site), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    installed = {
        path.name.removesuffix(".py")
        for path in site.iterdir()
        if not path.name.endswith(".dist-info") and path.name not in {"bin", "__pycache__"}
    }

    assert installed == {"waitstate", "workflows", "activities", "worker", "starter"}
    assert installed <= _layout_names()
    assert not installed & GENERIC
