"""docs/agents.md's "A support desk: a conversation that waits", run as written: its app, outside
the repository, served by `scripts/services.py up`, and its `starter.py` commands in order: a
message whose reply waits for a webhook, a message answered during that wait, a refund whose
reply waits for an approval given from the CLI, and `status` listing the three replies."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from tests.docs import between, files_shown, page, section
from tests.helpers import eventually
from tests.rigs import Services
from tests.tiers import SUBPROCESS, TEMPORAL, needs

HEADING = "## A support desk: a conversation that waits"
WITHIN = 90.0


def _section() -> str:
    return section(page("docs/agents.md") + "\n## ", HEADING)


def _commands() -> list[list[str]]:
    """The section's CLI commands, in order, as argument lists (comments dropped)."""
    block = between(_section(), "```sh\n", "```")
    return [
        shlex.split(line, comments=True)[1:]
        for line in block.splitlines()
        if line.startswith(".venv/bin/waitstate ")
    ]


@pytest.fixture(scope="module")
@needs(TEMPORAL, SUBPROCESS)
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    package = tmp_path_factory.mktemp("desk-app")
    files = files_shown(_section())
    assert list(files) == ["desk/app.py"]
    (package / "desk").mkdir()
    (package / "desk" / "__init__.py").write_text("")
    for path, text in files.items():
        (package / path).write_text(text)
    env: dict[str, str | None] = {"PYTHONPATH": str(package), "WAITSTATE_APPS": "desk.app:app"}
    with Services(tmp_path_factory.mktemp("state"), env=env).up() as running:
        yield running


async def test_the_documented_conversation_runs_as_written(desk: Services) -> None:
    commands = _commands()
    assert [c[0] for c in commands] == [
        "chat",
        "chat",
        "chat",
        "pending",
        "chat",
        "approve",
        "status",
    ]
    outputs: list[str] = []
    for command in commands:
        if command[0] == "pending":  # once the refund's request is open, for `pending` to show

            async def requested() -> list[dict[str, Any]]:
                listed = await desk.starter("pending", "--json")
                return [p for p in json.loads(listed.stdout) if p["tool"] == "refund_order"]

            await eventually(requested, "the refund's approval request", WITHIN)
        if command[0] == "status":  # once every message has its reply

            async def replied() -> dict[str, Any] | None:
                state = await desk.status("desk-42")
                messages = state["thread"]["messages"]
                done = len(messages) == 4 and all(m["status"] == "replied" for m in messages)
                return state if done else None

            await eventually(replied, "the four replies", WITHIN)
        done = await desk.starter(*command)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        outputs.append(done.stdout)
    state = await desk.status("desk-42")

    # The second message was answered while the first one's reply waited for the webhook.
    assert "reply: Exports take a few seconds; I will tell you." in outputs[1]
    replies = {m["message_id"]: m for m in state["thread"]["messages"]}
    assert replies["m1"]["reply"] == "Your export is ready: acme.zip."
    assert replies["m2"]["reply"] == "Exports take a few seconds; I will tell you."
    assert replies["m2"]["replied_at"] < replies["m1"]["replied_at"]
    assert replies["m3"]["reply"] == "Order 1042 is refunded."
    # The fourth was answered while the refund waited for its approver, before the refund ran.
    assert "reply: Your refund waits for an approver." in outputs[4]
    assert replies["m4"]["reply"] == "Your refund waits for an approver."
    assert replies["m4"]["replied_at"] < request_decided_at(state)
    [request] = state["approvals"].values()
    assert (request["tool"], request["status"]) == ("refund_order", "approved")
    assert request["decision"]["reviewer"] == "dana"
    [export] = state["operations"].values()
    assert (export["completion"], export["status"]) == ("callback", "succeeded")
    assert state["agent"] == "support"
    # `status` prints every message with its reply, as the page says.
    for line in ("m1 replied", "m2 replied", "m3 replied", "m4 replied"):
        assert line in outputs[-1], outputs[-1]


def request_decided_at(state: dict[str, Any]) -> str:
    """When the run's one approval request was decided (ISO time, as `status --json` has it)."""
    [request] = state["approvals"].values()
    return str(request["decision"]["decided_at"])
