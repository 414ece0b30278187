"""moto's S3 server that outlives a SIGKILL: the suite's S3 store, for its blob store outage.

    python -m chaos.s3_server --port PORT --recording FILE

moto keeps its data in memory; with `MOTO_ENABLE_RECORDING`, it appends every request it serves
to `FILE` (moto's recorder). Started again after a SIGKILL, this serves the recorded requests to
itself, in process and in order, before it listens: it comes back with the bucket and every
blob as they were, and nobody can reach it meanwhile (moto's own replay endpoint replays over
HTTP once the server listens, racing the workers that read their blobs the moment it is back).
Then it serves on PORT as `python -m moto.server` does, recording on.
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path
from urllib.parse import urlsplit

from moto.moto_api import recorder
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple
from werkzeug.test import Client


def replay(app: DomainDispatcherApplication, recording: Path) -> int:
    """Serve every recorded request to `app` again, unrecorded; returns how many."""
    if not recording.exists():
        return 0
    client = Client(app)
    lines = [line for line in recording.read_text().splitlines() if line.strip()]
    recorder.stop_recording()
    try:
        for line in lines:
            entry = json.loads(line)
            body = entry.get("body") or b""
            if entry.get("body_encoded"):
                body = base64.b64decode(body)
            headers = {k: v for k, v in entry["headers"].items() if k != "Transfer-Encoding"}
            url = urlsplit(entry["url"])
            client.open(
                url.path,
                base_url=f"{url.scheme}://{url.netloc}",
                method=entry["method"],
                query_string=url.query,
                headers=headers,
                data=body,
            )
    finally:
        recorder.start_recording()
    return len(lines)


def main() -> None:
    """Replay the recording, then serve."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--recording", type=Path, required=True)
    args = parser.parse_args()
    app = DomainDispatcherApplication(create_backend_app)
    print(f"replayed {replay(app, args.recording)} requests", flush=True)
    run_simple(
        args.host,
        args.port,
        app,
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
