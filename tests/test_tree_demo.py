"""`make tree-demo` (scripts/tree_demo.py) after `make up`, as a user runs it: the research lead
to its report, the payments read approved on its own, the links printed, a clean exit."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from tests.rigs import Services

pytestmark = [pytest.mark.temporal, pytest.mark.subprocess]


async def test_the_tree_demo_prints_each_researcher_the_approval_the_report_and_the_links(
    tmp_path: Path,
) -> None:
    services = Services(tmp_path)
    up = await services.services("up")
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        done = await services.python("scripts/tree_demo.py", "--approve-after", "1")
    finally:
        down = await services.services("down")

    assert down.returncode == 0, down.stderr
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = done.stdout
    [run_id] = [line.split()[1] for line in out.splitlines() if line.startswith("run research-")]
    for node in ("researcher-1", "data-researcher-2", "payments-researcher-3"):
        assert f"  {node}: completed" in out
    assert f"approve {run_id}/payments-researcher-3 --request " in out
    assert "auto-approved request " in out
    assert out.count("completed after ") == 1
    assert "- data-researcher-2: Exported " in out
    assert "- payments-researcher-3: Refunded on claim C-118 so far: $0 (0 refunds)." in out
    query = quote(f'RootWorkflowId="{run_id}"')
    assert f"every node: {services.ui_url}/namespaces/default/workflows?query={query}" in out
