"""docs/versions.md and the code, in step: every patch marker the workflows check for has its
section (why, since when, its status), every section's status is what the code does with its
marker, and `starter.py versions` counts runs by the same markers in the page's order. Also the
SDK's behaviour the page's lifecycle rests on: what replays once a marker is deprecated, then
removed."""

from __future__ import annotations

import ast
import asyncio
import importlib
import re
import uuid
from pathlib import Path

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from temporalio.workflow import NondeterminismError

import waitstate.cli.main as starter
from tests import helpers
from tests.helpers import HISTORIES, eventually, first_unreplayable, recorded_patches
from waitstate.schemas.run import REVISION

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / "workflows"
DOC = ROOT / "docs" / "versions.md"
PATCHED, DEPRECATED, REMOVED = "in service", "deprecated", "removed"
# What each call says of its marker.
CALLS = {"patched": PATCHED, "deprecate_patch": DEPRECATED}
# A marker's section: "## `agent-run-4`: questions mid-flight", then, among its lines,
# "Status: in service (...)".
_SECTION = re.compile(r"^## `([^`]+)`", re.MULTILINE)
_STATUS = re.compile(r"^Status: (in service|deprecated|removed)\b", re.MULTILINE)
_SINCE = re.compile(r"^Since [0-9a-f]{7,40} \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)", re.MULTILINE)
# "The histories in `tests/histories/` are runs of every version: 160 with no marker, 10 of
# `agent-run-9` (...), ..."
_KEPT = re.compile(r"(\d+) (?:with no marker|of `([^`]+)`)")


def markers_in_source(source: str, module: str) -> dict[str, str]:
    """The markers a workflow module's `patched`/`deprecate_patch` calls name, with what the
    call makes of each (in service, deprecated). A marker named by a constant is read from
    the module (`workflows.versions.SOME_PATCH`).

    Raises:
        AssertionError: a call whose marker cannot be told from the source.
    """
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if isinstance(node.func, ast.Name):
            name = node.func.id
        if name not in CALLS:
            continue
        assert node.args, f"{module}: a {name}() call without its marker"
        marker = _marker(node.args[0], module)
        # A marker both checked and deprecated somewhere is still in service.
        if found.get(marker) != PATCHED:
            found[marker] = CALLS[name]
    return found


def _marker(argument: ast.expr, module: str) -> str:
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    if isinstance(argument, ast.Name):
        value = getattr(importlib.import_module(module), argument.id, None)
        if isinstance(value, str):
            return value
    raise AssertionError(f"{module}: cannot tell which marker {ast.unparse(argument)} names")


def markers_in_code() -> dict[str, str]:
    """Every marker the workflows check for, and the patch ids `workflows/versions.py`
    declares (its module-level string constants), with their status."""
    found: dict[str, str] = {}
    for path in sorted(WORKFLOWS.rglob("*.py")):
        module = ".".join(("waitstate", *path.relative_to(ROOT).with_suffix("").parts))
        for marker, status in markers_in_source(path.read_text(), module).items():
            if found.get(marker) != PATCHED:
                found[marker] = status
    versions = importlib.import_module("waitstate.workflows.versions")
    for name, value in vars(versions).items():
        if name.isupper() and isinstance(value, str):
            assert value in found, f"workflows/versions.py declares {name} = {value!r}, unused"
    return found


def markers_in_doc(text: str) -> dict[str, str]:
    """The markers the page has a section for, in its order, with each one's status."""
    starts = [(found.start(), found[1]) for found in _SECTION.finditer(text)]
    sections: dict[str, str] = {}
    for index, (start, marker) in enumerate(starts):
        end = starts[index + 1][0] if index + 1 < len(starts) else len(text)
        body = text[start:end]
        if (level_two := body.find("\n## ", 1)) > 0:  # the next section that names no marker
            body = body[:level_two]
        status = _STATUS.search(body)
        assert status, f"docs/versions.md: the section of {marker!r} has no 'Status: ...' line"
        assert _SINCE.search(body), f"docs/versions.md: {marker!r} does not say since when"
        assert "Why: " in body, f"docs/versions.md: {marker!r} does not say why"
        sections[marker] = status[1]
    return sections


def problems(code: dict[str, str], doc: dict[str, str]) -> list[str]:
    """Where the page and the code disagree."""
    found = []
    for marker, status in code.items():
        if marker not in doc:
            found.append(f"{marker!r} is checked in workflows/ but has no section")
        elif doc[marker] != status:
            found.append(f"{marker!r} is {status} in the code, {doc[marker]} in the doc")
    for marker, status in doc.items():
        if marker not in code and status != REMOVED:
            found.append(f"{marker!r} is {status} in the doc, but no code checks for it")
    return found


def test_every_marker_in_the_code_has_its_story_and_its_status() -> None:
    code, doc = markers_in_code(), markers_in_doc(DOC.read_text())

    assert problems(code, doc) == []
    # The 1.0 baseline: no marker in the code; the seven of before it, folded into it, keep
    # their stories, removed.
    assert code == {}
    assert doc == {
        marker: REMOVED
        for marker in (
            "exactly-once-v2",
            "agent-run-3",
            "agent-run-4",
            "agent-run-5",
            "agent-run-6",
            "agent-run-7",
            "agent-run-8",
        )
    }


def test_versions_counts_runs_by_every_marker_in_the_docs_order() -> None:
    doc = markers_in_doc(DOC.read_text())

    assert starter.patch_markers() == [m for m, status in doc.items() if status != REMOVED]


def test_the_page_counts_the_committed_histories_of_each_version() -> None:
    said = " ".join(
        DOC.read_text()
        .split("The histories in `tests/histories/` are runs of every version:")[1]
        .split(" (named")[0]
        .split()
    )
    newest_first = list(reversed(starter.patch_markers()))
    kept: dict[str, int] = {}
    for path in sorted(HISTORIES.glob("*.json")):
        recorded = recorded_patches(WorkflowHistory.from_json(path.stem, path.read_text()).events)
        version = next((m for m in newest_first if m in recorded), "")
        kept[version] = kept.get(version, 0) + 1

    assert {marker: int(n) for n, marker in _KEPT.findall(said)} == kept


def test_a_patch_added_without_its_story_is_found() -> None:
    source = 'from temporalio import workflow\nif workflow.patched("agent-run-9"):\n    pass\n'
    code = {**markers_in_code(), **markers_in_source(source, "waitstate.workflows.versions")}

    assert problems(code, markers_in_doc(DOC.read_text())) == [
        "'agent-run-9' is checked in workflows/ but has no section"
    ]


# A page with a marker after the baseline, for the checks that need one in service.
NEXT = """
## `agent-run-9`: the next patch

Since 0123456 (2027-01-04 09:00 UTC).

Status: in service (`workflow.patched`, step (a) of the lifecycle).

Why: a behaviour that changes what a run issues.
"""


def test_a_marker_deprecated_or_removed_in_the_code_but_not_in_the_doc_is_found() -> None:
    doc = markers_in_doc(DOC.read_text() + NEXT)
    code = {**markers_in_code(), "agent-run-9": PATCHED}
    deprecated = {**code, "agent-run-9": DEPRECATED}
    removed = markers_in_code()
    retired_in_doc = {**doc, "agent-run-9": REMOVED}

    assert problems(code, doc) == []
    assert problems(deprecated, doc) == [
        "'agent-run-9' is deprecated in the code, in service in the doc"
    ]
    assert problems(removed, doc) == [
        "'agent-run-9' is in service in the doc, but no code checks for it"
    ]
    assert problems(code, retired_in_doc) == [
        "'agent-run-9' is in service in the code, removed in the doc"
    ]


def test_a_section_without_its_status_or_its_date_is_refused() -> None:
    for missing in ("Status: in service", "Since 0123456 (2027-01-04 09:00 UTC)"):
        broken = DOC.read_text() + NEXT.replace(missing, "", 1)
        try:
            markers_in_doc(broken)
        except AssertionError as err:
            assert "'agent-run-9'" in str(err)
        else:
            raise AssertionError(f"a section without {missing!r} was taken")


# --- what the lifecycle rests on: the SDK's patches, on the real dev server ------------------

LIFECYCLE_MARKER = "lifecycle-test"
CHANGE_VERSION = SearchAttributeKey.for_keyword_list("TemporalChangeVersion")


@workflow.defn(name="Lifecycle", sandboxed=False)
class Patched:
    """Step (a): the marker checked."""

    @workflow.run
    async def run(self) -> bool:
        return workflow.patched(LIFECYCLE_MARKER)


@workflow.defn(name="Lifecycle", sandboxed=False)
class Deprecated:
    """Step (b): the marker deprecated, the new branch unconditional."""

    @workflow.run
    async def run(self) -> bool:
        workflow.deprecate_patch(LIFECYCLE_MARKER)
        return True


@workflow.defn(name="Lifecycle", sandboxed=False)
class Removed:
    """Step (c): no call at all."""

    @workflow.run
    async def run(self) -> bool:
        return True


async def _history_of(
    env: WorkflowEnvironment, task_queue: str, workflow_class: type
) -> tuple[WorkflowHistory, list[str]]:
    """A finished run of `workflow_class`: its history and its TemporalChangeVersion."""
    async with Worker(env.client, task_queue=task_queue, workflows=[workflow_class]):
        handle = await env.client.start_workflow(
            "Lifecycle", id=f"lifecycle-{uuid.uuid4()}", task_queue=task_queue, result_type=bool
        )
        assert await handle.result() is True

    async def upserted() -> list[str] | None:
        described = await handle.describe()
        return list(described.typed_search_attributes.get(CHANGE_VERSION) or []) or None

    return await handle.fetch_history(), await eventually(upserted, "TemporalChangeVersion")


async def _replays(history: WorkflowHistory, workflow_class: type) -> Exception | None:
    replayer = Replayer(workflows=[workflow_class])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    return result.replay_failure


async def test_the_lifecycles_steps_replay_as_the_doc_says(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    patched, patched_version = await _history_of(dev_env, task_queue, Patched)
    deprecated, deprecated_version = await _history_of(dev_env, task_queue, Deprecated)

    # Both record the marker as the run's change version: `versions` counts both.
    assert patched_version == deprecated_version == [LIFECYCLE_MARKER]
    # (b): a run that recorded the marker replays once it is deprecated.
    assert await _replays(patched, Deprecated) is None
    # (c): removing the call breaks the runs that recorded it with `patched`...
    removed = await _replays(patched, Removed)
    assert isinstance(removed, NondeterminismError), removed
    # At the marker: code that no longer asks for it meets it in the history.
    fails_at = await first_unreplayable(Replayer(workflows=[Removed]), patched)
    assert fails_at is not None and fails_at[1] == "MARKER_RECORDED", fails_at
    # ... and not those that recorded it with `deprecate_patch`.
    assert await _replays(deprecated, Removed) is None


# "### Revision 1: a run that completes upserts no status as it ends"
_REVISION_SECTION = re.compile(r"^### Revision (\d+): ", re.MULTILINE)
# "..., of which 87 of revision 0 and 4 of revision 1."
_REVISION_KEPT = re.compile(r"(\d+) of revision (\d+)")


def test_every_revision_has_its_story_and_its_histories() -> None:
    versions = importlib.import_module("waitstate.workflows.versions")
    declared = sorted(
        value
        for name, value in vars(versions).items()
        if name.isupper() and isinstance(value, int) and not isinstance(value, bool)
    )
    text = DOC.read_text()
    said = " ".join(text.split("are runs of every version:")[1].split("\n\n")[0].split())
    kept: dict[int, int] = {}
    for path in sorted(HISTORIES.glob("*.json")):
        history = WorkflowHistory.from_json(path.stem, path.read_text())
        revision = asyncio.run(helpers.recorded_revision(history))
        kept[revision] = kept.get(revision, 0) + 1
        # Named by its revision, so a new revision's recordings sit beside the old ones.
        assert (".revision-" in path.name) == (revision > 0), path.name

    # Each revision the workflows branch on has its section, the newest is what starts get.
    assert declared == list(range(1, REVISION + 1))
    assert [int(n) for n in _REVISION_SECTION.findall(text)] == declared
    assert {int(r): int(n) for n, r in _REVISION_KEPT.findall(said)} == kept
    assert set(kept) == {0, *declared}  # every revision has histories of its own
