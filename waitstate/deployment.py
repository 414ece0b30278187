"""The worker deployment version a worker joins: its deployment name and build id.

The build id names the code: WAITSTATE_BUILD_ID, else the package's version and the commit of the
checkout the worker runs from, with a digest of its uncommitted changes if it has some. The CLI's
`replay-check` scopes its runs by the same id.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import subprocess
from datetime import timedelta
from pathlib import Path

from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import WorkerDeploymentConfig

from waitstate.settings import Settings

log = logging.getLogger("waitstate.worker")

# What a versioned worker's runs do when a new version becomes current: each stays on the version
# that started it (its history replays on that code alone) and moves to the current one when it
# continues as new (`workflows/continuation.py`). Set here, not in `@workflow.defn`: the SDK sends
# a workflow's own behaviour from unversioned workers too, and the server refuses their tasks.
RUNS_STAY_ON = VersioningBehavior.PINNED
# The checkout the worker runs from, whose commit (and uncommitted changes) name its build id;
# installed from a wheel, the site-packages directory, which has no `.git` of its own.
CHECKOUT = Path(__file__).resolve().parents[1]
# Each git command the build id asks (a hung one fails the worker's start, not its polls).
GIT_TIMEOUT = timedelta(seconds=10)
CHUNK = 1 << 20


def build_id(settings: Settings, checkout: Path = CHECKOUT) -> str:
    """The worker's build id: WAITSTATE_BUILD_ID, else the package's version and the commit of
    the checkout it runs from (`0.1.0+dd29af14cb4a`), else the version alone (installed from a
    wheel, or an image without its `.git`: set WAITSTATE_BUILD_ID there, or two builds of one
    version share an id).

    A checkout with uncommitted changes (tracked files changed, or files git does not ignore
    added) is not the commit's code: its id also names a digest of what differs
    (`0.1.0+dd29af14cb4a.dirty-3f2a9c1b7e4d`), so an edited tree never polls as the version
    of its commit and is never handed that version's runs. The same changes give the same id.

    Raises:
        BuildIdError: git names the commit but cannot say what differs from it.
    """
    if settings.build_id:
        return settings.build_id
    version = importlib.metadata.version("waitstate")
    commit = ""
    # Only the checkout's own repository names the build (not one an installed wheel's
    # site-packages happens to sit in).
    if (checkout / ".git").exists():
        try:
            commit = _git_bytes(checkout, "rev-parse", "--short=12", "HEAD").decode().strip()
        except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
            commit = ""
    if not commit:
        log.warning("no git commit found: build id %s is the version alone", version)
        return version
    changes = _uncommitted_digest(checkout)
    if changes is None:
        return f"{version}+{commit}"
    # Not logged: the worker logs the version it polls as, and the CLI says which it checks.
    return f"{version}+{commit}.dirty-{changes}"


class BuildIdError(RuntimeError):
    """The checkout's build id cannot be told (set WAITSTATE_BUILD_ID)."""


def _uncommitted_digest(checkout: Path) -> str | None:
    """A digest of the files the checkout holds otherwise than its commit (None: none): those
    changed, added or deleted since HEAD, staged or not, and those git neither tracks nor
    ignores, each by path and content (read in chunks: a large file costs time, not memory).
    Only what the tree holds counts, not how it got there (staged or not, by which steps).

    Raises:
        BuildIdError: git did not answer.
    """
    try:
        changed = _git_bytes(checkout, "diff", "HEAD", "--name-only", "--no-renames", "-z")
        untracked = _git_bytes(checkout, "ls-files", "--others", "--exclude-standard", "-z")
    except (OSError, subprocess.SubprocessError) as err:
        raise BuildIdError(
            f"cannot tell whether {checkout} has uncommitted changes ({type(err).__name__}): "
            "set WAITSTATE_BUILD_ID"
        ) from err
    names = sorted(set(filter(None, (changed + untracked).split(b"\0"))))
    if not names:
        return None
    digest = hashlib.sha256()
    for name in names:
        digest.update(b"\0path\0" + name + b"\0")
        try:
            with (checkout / os.fsdecode(name)).open("rb") as file:
                while chunk := file.read(CHUNK):
                    digest.update(chunk)
        except FileNotFoundError:
            digest.update(b"\0deleted")
        except OSError:  # unreadable (a directory a submodule left, a socket): named only
            digest.update(b"\0unreadable")
    return digest.hexdigest()[:12]


def _git_bytes(checkout: Path, *args: str) -> bytes:
    """What a git command prints in `checkout` (names: short).

    Raises:
        OSError, subprocess.SubprocessError: git is missing, fails or hangs.
    """
    return subprocess.run(
        ["git", "--no-optional-locks", *args],
        cwd=checkout,
        capture_output=True,
        timeout=GIT_TIMEOUT.total_seconds(),
        check=True,
    ).stdout


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """The worker deployment version the worker joins (None: versioning is off)."""
    if not settings.versioning:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.deployment, build_id(settings)),
        use_worker_versioning=True,
        default_versioning_behavior=RUNS_STAY_ON,
    )
