"""Look at the Web UI as a person would: start a run that waits for approval, open the list of
runs filtered by `WaitingFor="approval"` in headless Chromium, and save a screenshot.

    make ui-check        # after `make up`; installs Debian's chromium if it is missing

The screenshot is written to $WAITSTATE_STATE_DIR/ui-check.png (default .temporal/).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
# Headless, and without these Chromium keeps trying to reach Google's hosts, which this machine
# cannot (the browser tests start it with these too: tests/browser/conftest.py).
OFFLINE_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CHROMIUM_FLAGS = [
    *OFFLINE_FLAGS,
    "--hide-scrollbars",
    "--window-size=1600,1000",
    "--virtual-time-budget=10000",
]


def main() -> int:
    """Entry point."""
    chromium = shutil.which("chromium") or _install_chromium()
    state = Path(os.environ.get("WAITSTATE_STATE_DIR", ROOT / ".temporal")).resolve()
    ui = os.environ.get(
        "TEMPORAL_UI_URL", f"http://127.0.0.1:{os.environ.get('TEMPORAL_UI_PORT', '8233')}"
    )
    run_id = f"ui-check-{int(time.time())}"
    subprocess.run(
        [sys.executable, "starter.py", "run", "Publish the quarterly report", "--id", run_id,
         "--model", "scripted:ask-first", "--tools", "request_approval"],
        cwd=ROOT, check=True,
    )  # fmt: skip
    time.sleep(3)  # visibility catches up with the run's search attributes
    query = quote('WaitingFor="approval"')
    url = f"{ui}/namespaces/default/workflows?query={query}"
    shot = state / "ui-check.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}", url],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    print(f"screenshot of {url}\n  -> {shot}")
    print(f"the run {run_id} waits for approval: .venv/bin/waitstate approve {run_id}")
    return 0


def _install_chromium() -> str:
    print("chromium is missing: installing Debian's package (needs root)")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "chromium"],
        check=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )  # fmt: skip
    found = shutil.which("chromium")
    if not found:
        sys.exit("error: chromium did not install")
    return found


if __name__ == "__main__":
    sys.exit(main())
