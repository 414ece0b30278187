"""waitstate/schemas/ is pydantic types only: importing every module of it loads no Temporal code."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import waitstate.schemas as schemas

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parent.parent.parent


def test_schemas_import_no_temporal_module() -> None:
    modules = [f"waitstate.schemas.{info.name}" for info in pkgutil.iter_modules(schemas.__path__)]
    code = (
        f"import sys, json, importlib; [importlib.import_module(m) for m in {modules!r}]; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    )

    assert "waitstate.schemas.builtin" in modules
    assert "pydantic" in loaded
    assert "temporalio" not in loaded
