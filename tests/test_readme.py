"""What README lists is what exists."""

from __future__ import annotations

import re
from pathlib import Path

from waitstate.providers.scripted import SCRIPTS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_the_listed_scripts_are_the_built_in_ones() -> None:
    match = re.search(r"The built-in scripts .*?\) are (.*?)\.\s", README, re.DOTALL)
    assert match is not None
    listed = re.findall(r"`([a-z-]+)`", match[1])

    assert sorted(listed) == sorted(SCRIPTS)
