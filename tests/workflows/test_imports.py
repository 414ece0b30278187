"""Workflow modules stay cheap to import: the sandbox re-imports them for every run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parent.parent.parent
# Anything an activity needs (provider SDKs, HTTP clients, tool implementations) must not be
# pulled in by a workflow module.
FORBIDDEN = (
    "openai",
    "anthropic",
    "httpx",
    "httpx2",
    "waitstate.activities",
    "waitstate.providers",
    "waitstate.tools",
    "waitstate.blobs",
    "waitstate.gateway",
    "waitstate.auth",
    "waitstate.client",
)


@pytest.mark.parametrize(
    "module", ["waitstate.workflows.agent_run", "waitstate.workflows.blob_cleanup"]
)
def test_workflow_module_imports_only_temporalio_stdlib_and_schemas(module: str) -> None:
    code = f"import sys, json; import {module}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    )

    assert not [m for m in loaded if any(m == f or m.startswith(f"{f}.") for f in FORBIDDEN)]
    assert {"temporalio", "waitstate.schemas", "pydantic"} <= set(loaded)
