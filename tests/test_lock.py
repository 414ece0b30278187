"""The lock is what a fresh machine installs: `uv.lock` agrees with pyproject.toml's ranges, and
this environment holds exactly the versions it pins (`make install` syncs it; a package
installed by hand, or a range changed without `make lock`, fails here)."""

from __future__ import annotations

import subprocess
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
UV = ROOT / ".venv-uv" / "bin" / "uv"


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _lock() -> dict[str, Any]:
    return tomllib.loads((ROOT / "uv.lock").read_text())


def _key(requirement: Requirement, extra: str | None) -> tuple[str, str, str, str]:
    """A requirement as name, extras, specifier and the extra it belongs to."""
    return (
        canonicalize_name(requirement.name),
        ",".join(sorted(requirement.extras)),
        str(requirement.specifier),
        extra or "",
    )


def test_the_lock_was_made_from_the_ranges_of_pyproject() -> None:
    project = _pyproject()["project"]
    asked = {_key(Requirement(text), None) for text in project["dependencies"]}
    for extra, texts in project["optional-dependencies"].items():
        asked |= {_key(Requirement(text), extra) for text in texts}
    [ours] = [p for p in _lock()["package"] if p["name"] == project["name"]]
    locked = {
        (
            canonicalize_name(entry["name"]),
            ",".join(sorted(entry.get("extras", []))),
            str(Requirement(f"x{entry.get('specifier', '')}").specifier),
            entry.get("marker", "").removeprefix("extra == '").removesuffix("'"),
        )
        for entry in ours["metadata"]["requires-dist"]
    }

    assert asked == locked, "pyproject.toml changed since uv.lock was made: run `make lock`"


def test_this_environment_holds_the_versions_the_lock_pins() -> None:
    # A universal lock may pin two versions of a package, for different Pythons.
    pinned: dict[str, set[str]] = {}
    for package in _lock()["package"]:
        if package["source"].get("registry"):
            pinned.setdefault(canonicalize_name(package["name"]), set()).add(package["version"])
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    differ = {
        name: (sorted(versions), installed[name])
        for name, versions in pinned.items()
        if name in installed and installed[name] not in versions
    }

    assert len(set(pinned) & set(installed)) > 100  # the lock's packages are here to compare
    assert differ == {}, "installed versions other than uv.lock's: run `make install`"


@pytest.mark.subprocess
def test_uv_finds_the_lock_up_to_date() -> None:
    checked = subprocess.run(
        [str(UV), "lock", "--check", "--offline", "--python", "python3"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert checked.returncode == 0, checked.stderr
