"""build_providers: which providers a worker can create from its settings."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import pytest
from temporalio.common import VersioningBehavior

from waitstate.deployment import CHECKOUT, build_id, deployment_config
from waitstate.providers import UnknownModelError
from waitstate.providers.anthropic import AnthropicProvider
from waitstate.providers.openai import OpenAIProvider
from waitstate.providers.scripted import ScriptedProvider
from waitstate.settings import Settings
from waitstate.worker import build_providers


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("openai:gpt-4.1", "OPENAI_API_KEY"), ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY")],
)
def test_provider_without_key_or_base_url_is_unknown(spec: str, variable: str) -> None:
    providers = build_providers(Settings.from_env({}))

    with pytest.raises(UnknownModelError, match=f"{variable} is not set on the worker"):
        providers.resolve(spec)


@pytest.mark.parametrize(
    ("env", "spec", "kind"),
    [
        ({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, "openai:llama", OpenAIProvider),
        ({"OPENAI_API_KEY": "sk-test"}, "openai:gpt-4.1", OpenAIProvider),
        ({"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}, "anthropic:claude", AnthropicProvider),
        ({"ANTHROPIC_API_KEY": "sk-ant-test"}, "anthropic:claude", AnthropicProvider),
        ({}, "scripted:demo", ScriptedProvider),
    ],
)
def test_configured_provider_resolves(env: dict[str, str], spec: str, kind: type) -> None:
    # Port 1 refuses connections: building a provider must not touch the network.
    provider, model = build_providers(Settings.from_env(env)).resolve(spec)

    assert isinstance(provider, kind)
    assert model == spec.partition(":")[2]


def test_an_unversioned_worker_joins_no_deployment() -> None:
    assert deployment_config(Settings.from_env({})) is None


def test_a_versioned_worker_pins_its_runs_to_its_build() -> None:
    settings = Settings.from_env(
        {"WAITSTATE_VERSIONING": "1", "WAITSTATE_DEPLOYMENT": "agents", "WAITSTATE_BUILD_ID": "b7"}
    )

    config = deployment_config(settings)

    assert config is not None and config.use_worker_versioning
    assert config.version.to_canonical_string() == "agents.b7"
    assert config.default_versioning_behavior == VersioningBehavior.PINNED


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=checkout, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git checkout of one commit, with a file git ignores."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "agent_run.py").write_text("STEPS = 1\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "A")
    return tmp_path


@pytest.mark.subprocess  # git
def test_the_build_id_is_the_package_version_and_the_checkout_commit(checkout: Path) -> None:
    commit = _git(checkout, "rev-parse", "--short=12", "HEAD")
    (checkout / "worker.log").write_text("ignored by git: not a change")

    assert build_id(Settings(), checkout) == f"{importlib.metadata.version('waitstate')}+{commit}"
    assert build_id(Settings(build_id="set-by-ops"), checkout) == "set-by-ops"


@pytest.mark.subprocess  # git
def test_an_installed_worker_is_named_by_the_version_alone_even_inside_a_repository(
    checkout: Path,
) -> None:
    # A project's venv inside its own repository: the wheel's site-packages is no checkout.
    site = checkout / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)

    assert build_id(Settings(), site) == importlib.metadata.version("waitstate")
    # Run from this checkout, the worker is named by this checkout's commit.
    assert (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / ".git").exists()


@pytest.mark.subprocess  # git
def test_uncommitted_changes_change_the_build_id(checkout: Path) -> None:
    clean = build_id(Settings(), checkout)
    code = checkout / "agent_run.py"

    code.write_text("STEPS = 2\n")  # an edit not committed
    edited = build_id(Settings(), checkout)
    again = build_id(Settings(), checkout)
    code.write_text("STEPS = 3\n")
    edited_otherwise = build_id(Settings(), checkout)
    code.write_text("STEPS = 1\n")  # back to the commit's
    restored = build_id(Settings(), checkout)
    (checkout / "steps.py").write_text("EXTRA = True\n")  # a new file, not committed
    added = build_id(Settings(), checkout)
    _git(checkout, "add", "steps.py")  # staged: still not the commit's
    staged = build_id(Settings(), checkout)

    assert edited.startswith(f"{clean}.dirty-") and edited == again
    assert len({clean, edited, edited_otherwise, added}) == 4
    assert restored == clean
    assert added.startswith(f"{clean}.dirty-") and staged == added
    # An operator's WAITSTATE_BUILD_ID still wins.
    assert build_id(Settings(build_id="set-by-ops"), checkout) == "set-by-ops"
