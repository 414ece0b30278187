"""What the README and the docs say is what exists: the README is a front door that fits on a
few screens and opens every page in one click, every link lands on a page and a heading that
exist, the scripts listed are the built-in ones, and the README's own agent runs as written."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.docs import README, ROOT, anchors, files_shown, links, page, pages, section
from tests.helpers import make_worker
from waitstate.apps import load_apps
from waitstate.client import WaitstateClient
from waitstate.providers.scripted import SCRIPTS
from waitstate.schemas import RunInput

README_LINES = 300


def test_the_readme_is_a_front_door_under_300_lines() -> None:
    lines = page(README).count("\n")

    assert lines < README_LINES, f"README.md has {lines} lines"


def test_the_readme_links_every_page_of_the_docs() -> None:
    linked = {Path(target.split("#", 1)[0]).as_posix() for target in links(page(README))}
    docs = {path for path in pages() if path != README}

    assert docs, "no pages under docs/"
    assert docs - linked == set(), "pages the README does not link"


@pytest.mark.parametrize("path", sorted(pages()))
def test_every_link_lands_on_a_page_and_heading_that_exist(path: str) -> None:
    broken = []
    for target in links(page(path)):
        file, _, anchor = target.partition("#")
        landing = (ROOT / path).parent / file if file else ROOT / path
        if not landing.exists():
            broken.append(f"{target}: no such file")
        elif anchor and landing.suffix == ".md" and anchor not in anchors(landing.read_text()):
            broken.append(f"{target}: no such heading")

    assert broken == [], f"{path}: {broken}"


def test_the_listed_scripts_are_the_built_in_ones() -> None:
    pattern = re.compile(r"The built-in scripts .*?\) are (.*?)\.\s", re.DOTALL)
    [listing] = [m[1] for text in pages().values() for m in pattern.finditer(text)]
    listed = re.findall(r"`([a-z-]+)`", listing)

    assert sorted(listed) == sorted(SCRIPTS)


async def test_the_readmes_own_agent_runs_as_written(
    time_skipping_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The package the README has a reader make, outside the repository, loaded by reference.
    files = files_shown(section(page(README), "## Your own agent"))
    assert list(files) == ["desks/app.py"]
    (tmp_path / "desks").mkdir()
    (tmp_path / "desks" / "__init__.py").write_text("")
    for path, text in files.items():
        (tmp_path / path).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    apps = load_apps(["desks.app:app"])
    client = WaitstateClient(time_skipping_env.client, task_queue=task_queue)

    async with make_worker(time_skipping_env.client, task_queue, apps=apps):
        started = await client.start(
            RunInput(task="Where is the EMEA desk?", agent="desk-finder"),
            run_id=f"run-{uuid.uuid4()}",
        )
        outcome = await client.outcome(started.run_id)
        status = await client.query(started.run_id)

    assert outcome.status == "completed", outcome
    assert json.loads(outcome.final_output or "") == {
        "region": "emea",
        "desk": "Berlin",
        "currency": "EUR",
    }
    assert [step.name for step in status.steps if step.kind == "tool"] == ["lookup_region"]
