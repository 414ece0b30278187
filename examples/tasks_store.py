"""A Redis-protocol store in a process of its own (fakeredis's TCP server, with the Lua
scripts docket needs), for MCP servers whose tasks must outlive their restarts: the chaos
suite's and the tests'. Not for production: use Redis.

    python -m examples.tasks_store PORT     # then DEMO_MCP_TASKS_URL=redis://127.0.0.1:PORT/0
"""

from __future__ import annotations

import sys

import fakeredis

# How long a task may go without its server's lease renewed before the next life of a killed
# server runs it again (ISO 8601: docket reads no plain number; FASTMCP_DOCKET_REDELIVERY_TIMEOUT).
# The lease is renewed four times a period while the server lives.
REDELIVERY_TIMEOUT = "PT5S"


def main() -> None:
    port = int(sys.argv[1])
    print(f"tasks store listening on redis://127.0.0.1:{port}/0", flush=True)
    fakeredis.TcpFakeServer(("127.0.0.1", port)).serve_forever()


if __name__ == "__main__":
    main()
