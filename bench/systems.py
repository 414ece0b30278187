"""A stand-in for the external systems the bench's long tools call, served from a thread of the
driver (its CPU is no side's).

Exports (callback) accept a job and keep the callback URL and token it was given, so the driver
can play the external system and send the webhook itself at the moment it measures from. The
enrichment pipeline (polled) reports `running` until its job's duration has passed. The
approvals outbox accepts anything. Start requests are idempotent by Idempotency-Key, as the
real services are.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Export:
    """A started export: who started it and how to report on it."""

    key: str
    job_id: str
    callback_url: str | None
    callback_token: str | None


class BenchSystems:
    """The exports, pipeline jobs and outbox the bench's tools talk to."""

    def __init__(self, pipeline_seconds: float = 10.0) -> None:
        self.pipeline_seconds = pipeline_seconds
        self._lock = threading.Lock()
        self._exports: dict[str, Export] = {}  # by idempotency key
        self._pipelines: dict[str, float] = {}  # job id -> done at (monotonic)
        self._keys: dict[str, str] = {}  # pipeline idempotency key -> job id
        self.pipeline_polls = 0
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._http.daemon_threads = True
        self._http.systems = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Where the tools reach it (DEMO_SYSTEMS_URL)."""
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def export_for(self, workflow_id: str) -> Export | None:
        """The export the run `workflow_id` started, once its start arrived."""
        with self._lock:
            return self._exports.get(workflow_id)

    def exports_started(self, prefix: str) -> int:
        """How many runs whose id starts with `prefix` started an export."""
        with self._lock:
            return sum(1 for key in self._exports if key.startswith(prefix))

    def close(self) -> None:
        """Stop serving."""
        self._http.shutdown()
        self._http.server_close()

    def handle(self, method: str, path: str, key: str, body: dict[str, Any]) -> tuple[int, Any]:
        """Answer one request: (status, JSON body)."""
        with self._lock:
            if method == "POST" and path == "/exports":
                run = key.split("/", 1)[0]
                export = self._exports.get(run)
                if export is None:
                    export = Export(
                        key, f"exp_{uuid.uuid4().hex[:12]}",
                        body.get("callback_url"), body.get("callback_token"),
                    )  # fmt: skip
                    self._exports[run] = export
                return 201, {"job_id": export.job_id, "status": "running", "eta_seconds": 60}
            if method == "POST" and path == "/pipelines/enrich":
                job_id = self._keys.setdefault(key, f"enr_{uuid.uuid4().hex[:12]}")
                self._pipelines.setdefault(job_id, time.monotonic() + self.pipeline_seconds)
                return 201, {"job_id": job_id, "status": "running", "eta_seconds": 60}
            if method == "GET" and path.startswith("/pipelines/jobs/"):
                job_id = path.rsplit("/", 1)[1]
                self.pipeline_polls += 1
                if job_id not in self._pipelines:
                    return 404, {"detail": "no such job"}
                if time.monotonic() < self._pipelines[job_id]:
                    return 200, {"job_id": job_id, "status": "running", "progress": "50%"}
                result = {"dataset": "transactions", "enriched_rows": 1200}
                return 200, {"job_id": job_id, "status": "succeeded", "result": result}
            if method == "GET" and path.startswith("/exports/"):
                return 200, {"job_id": path.rsplit("/", 1)[1], "status": "running"}
            if method == "POST" and path.endswith("/cancel"):
                return 200, {"status": "cancelled"}
            if method == "POST" and path == "/approvals/outbox":
                return 201, {"id": uuid.uuid4().hex}
        return 404, {"detail": f"no route for {method} {path}"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def _answer(self, method: str) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", 0) or 0))
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        systems: BenchSystems = self.server.systems  # type: ignore[attr-defined]
        key = self.headers.get("Idempotency-Key", "")
        status, answer = systems.handle(method, self.path, key, body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass
