"""The bench's model server: `waitstate.testing.wire_server.WireServer` in a process of its own,
with a default rule that knows the arguments of the tools the bench uses.

    python -m bench.wire      # prints "wire server on <port>", serves until SIGTERM

The stock rule calls the first offered tool with `{}`; the bench's tools need arguments, and
the history-growth figure needs a model that calls `chunk` once a turn for as many turns as its
task says ("read 50 chunks"). Both sides of every figure get the very same replies. Requests are
not recorded: tens of thousands of them would only grow this process.
"""

from __future__ import annotations

import re
import signal
import threading
import uuid
from typing import Any

from waitstate.testing import wire_replies
from waitstate.testing.wire_server import (
    RecordedRequest,
    Reply,
    WireServer,
    openai_text,
    openai_tool_calls,
)

# Arguments the bench's model passes to each tool (anything else gets `{}`).
TOOL_ARGUMENTS = {
    "start_export": '{"dataset": "transactions", "period": "2025-Q3"}',
    "enrich_dataset": '{"dataset": "transactions"}',
}
_CHUNKS = re.compile(r"read (\d+) chunks")
# A context the run rebuilt from its ledger after a long wait (workflows/agent_run.py).
_REBUILT = re.compile(r"^Task: .*^Event: .*^Remaining: ", re.DOTALL | re.MULTILINE)
# What a real model answers to the run's checkpoint prompt (a call with no tools).
CHECKPOINT_ANSWER = "Done: started the job.\nRemaining: use its result to answer the task."


class BenchWireServer(WireServer):
    """A WireServer that forgets requests once answered."""

    def _record_and_pop(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            return self._replies.popleft() if self._replies else None


def bench_reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The bench's model: one call of the first tool (with its arguments) then an answer; for
    `chunk`, one call a turn until the task's count is reached."""
    names = [tool.get("function", {}).get("name", "") for tool in tools]
    if not names:
        return openai_text(CHECKPOINT_ANSWER)
    task = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if "chunk" in names and (wanted := _CHUNKS.search(str(task))):
        if turn < int(wanted.group(1)):
            return openai_tool_calls([(f"call_{turn}", "chunk", f'{{"n": {turn}}}')])
        return openai_text(f"{turn} chunks read")
    if messages and messages[-1].get("role") == "tool":
        return openai_text(f"Received the result: {str(messages[-1].get('content'))[:80]}")
    if _REBUILT.search(str(messages[-1].get("content") if messages else "")):
        # Woken after a long wait, the run rebuilt the context from its ledger: the event that
        # woke it is the result a real model would answer with, not a reason to start again.
        return openai_text("Received the result after the wait.")
    if turn == 0:
        name = names[0]
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        return openai_tool_calls([(call_id, name, TOOL_ARGUMENTS.get(name, "{}"))])
    return openai_text("ok")


def main() -> None:
    """Serve until SIGTERM."""
    wire_replies._default_openai_reply = bench_reply  # the rule for every OpenAI request
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with BenchWireServer(0) as server:
        print(f"wire server on {server.port}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
