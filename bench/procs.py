"""The bench's processes: the Temporal dev server, workers, the gateway and the model server,
each in a process of its own so its CPU and memory can be read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from scripts.services import SEARCH_ATTRIBUTES, SERVER_TUNING, free_port, port_open
from waitstate.converter import DATA_CONVERTER
from waitstate.workflows.search_attributes import ALL

ROOT = Path(__file__).resolve().parent.parent
_TICKS = os.sysconf("SC_CLK_TCK")
START_TIMEOUT = 60.0


@dataclass
class Proc:
    """A child process and its log."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        """The process id, for /proc."""
        return self.popen.pid

    def cpu_seconds(self) -> float:
        """User plus system CPU time so far (utime + stime of /proc/<pid>/stat)."""
        return cpu_seconds(self.pid)

    def rss_mb(self) -> float:
        """Resident memory now, in MB."""
        return rss_mb(self.pid)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; this process only."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def cpu_seconds(pid: int) -> float:
    """CPU seconds a process has used (fields 14 and 15 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mb(pid: int) -> float:
    """VmRSS of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def machine() -> str:
    """Cores, memory and CPU model, from /proc: figures mean little without them."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line),
        "unknown CPU",
    )
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    total = int(next(line for line in meminfo if line.startswith("MemTotal:")).split()[1])
    return f"{os.cpu_count()} cores ({model}), {total / 1024 / 1024:.1f} GB memory"


def spawn(name: str, command: list[str], env: dict[str, str], state: Path) -> Proc:
    """Start a process logging to `state/<name>.log`, in a session of its own."""
    log = state / f"{name}.log"
    with log.open("ab") as out:
        popen = subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
    return Proc(name, popen, log)


def wait_ready(proc: Proc, ready: str, timeout: float = START_TIMEOUT) -> None:
    """Wait until `ready` appears in the process's log.

    Raises:
        RuntimeError: the process exited or was not ready in time.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = proc.log.read_text(errors="replace")
        if ready in text:
            return
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited at start:\n{text[-3000:]}")
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name} not ready after {timeout:.0f}s; see {proc.log}")


def start_server(state: Path) -> tuple[Proc, int]:
    """The dev server as `make up` runs it (SQLite file, WAL, tuned), on free ports."""
    port, ui_port = free_port(), free_port()
    binary = Path(sys.executable).parent / "temporal"
    command = [
        str(binary), "server", "start-dev", "--ip", "127.0.0.1",
        "--port", str(port), "--ui-port", str(ui_port),
        "--db-filename", str(state / "temporal.db"), "--log-level", "warn",
        *SERVER_TUNING,
    ]  # fmt: skip
    for name, kind in SEARCH_ATTRIBUTES.items():
        command += ["--search-attribute", f"{name}={kind}"]
    proc = spawn("server", command, dict(os.environ), state)
    deadline = time.monotonic() + START_TIMEOUT
    while not (port_open(port) and port_open(ui_port)):
        if proc.popen.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the dev server did not start; see {proc.log}")
        time.sleep(0.2)
    return proc, port


def start_python(name: str, args: list[str], env: dict[str, str], state: Path, ready: str) -> Proc:
    """A Python module or script of this repository, started with this interpreter."""
    proc = spawn(name, [sys.executable, *args], {**env, "PYTHONUNBUFFERED": "1"}, state)
    try:
        wait_ready(proc, ready)
    except RuntimeError:
        proc.stop()
        raise
    return proc


@asynccontextmanager
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """The dev server (this interpreter's `temporal`), in memory, in this process, with
    waitstate's search attributes: for the figures that drive runs from the bench itself."""
    temporal = Path(sys.executable).parent / "temporal"
    async with await WorkflowEnvironment.start_local(
        data_converter=DATA_CONVERTER,
        dev_server_existing_path=str(temporal),
        search_attributes=ALL,
    ) as env:
        yield env
