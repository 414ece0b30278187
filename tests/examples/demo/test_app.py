"""The demo is an app like a user's: declared through the public `waitstate` API only, and
what a worker serves when no app is named."""

from __future__ import annotations

import ast
from pathlib import Path

import waitstate
from waitstate.apps import load_apps
from waitstate.worker import DEMO_APP

DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo"


def test_the_demo_imports_nothing_of_waitstate_but_its_public_api() -> None:
    private = []
    for path in sorted(DEMO.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("waitstate."):
                private.append(f"{path.name}: from {node.module} import ...")
            if isinstance(node, ast.Import):
                private += [
                    f"{path.name}: import {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("waitstate.")
                ]

    assert private == []


def test_every_public_name_resolves() -> None:
    missing = [name for name in waitstate.__all__ if getattr(waitstate, name, None) is None]

    assert missing == []
    assert sorted(waitstate.__all__) == waitstate.__all__


async def test_the_demo_app_loads_with_its_agents_and_every_demo_tool() -> None:
    apps = load_apps([DEMO_APP])
    try:
        researchers = ["researcher", "data-researcher", "payments-researcher"]
        assert list(apps.agents) == ["demo", "reporter", "research-lead", *researchers, "triage"]
        # Every tool but the purge, whose runs name it (its job asks a person to confirm), the
        # payments researcher's, and those that start the research lead's researchers.
        starts = {f"agent_{name}" for name in researchers}
        assert set(apps.agents["demo"].tool_names()) == {s.name for s in apps.tools} - {
            "purge_dataset",
            "read_payment_history",
            *starts,
        }
        assert len(apps.tools) == 15
        assert apps.agents["research-lead"].sub_agents == researchers
        # They run on the worker's default model, as the demo agent does.
        assert {apps.agents[name].model for name in ["demo", "research-lead", *researchers]} == {
            None
        }
        assert apps.agents["reporter"].tool_names() == [
            "reports__build_report",
            "reports__delete_dataset",
        ]
        assert apps.mcp.names() == ["reports"]
        # The triage answers JSON, from its own script (it reads the prompt), scored by the app.
        assert apps.agents["triage"].model == "scripted:triage"
        assert apps.agents["triage"].tool_names() == ["check_claim"]
        assert list(apps.scorers) == ["triage_valid"]
    finally:
        await apps.aclose()
