"""The documented app's run (docs/agents.md, "Your own agent") with its model over the Responses
API (`openai-responses:`) against a fake LLM that is not ours: llm-mock-api (PyPI), started as a
process of its own with a rules file, speaking `/v1/responses` to the real OpenAI SDK, streamed
and not. Its rules script the model's turns: a function call a turn (each with its reasoning,
which goes back on the later turns), the checkpoints written before the waits, then the final
answer; the run goes through a webhook, a poll and an approval given from the CLI, on the real
dev server, as against our own stand-in (tests/test_own_agent.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rigs import Services, port_open, service_port
from tests.test_own_agent import _check_the_story, _run_approving_from_the_cli, documented_app
from tests.tiers import SUBPROCESS, TEMPORAL, needs

MODEL = "outside-responses"
OUTCOME = {"region": "emea", "rows": 1200, "url": "https://r.example/1", "published": True}
# What the model does: a function call a turn, then the answer (each reply of the sequence
# answers the next request naming the model); a checkpoint, whenever the run writes one before
# a wait, is told by its system prompt (workflows' CHECKPOINT_PROMPT) and answered apart.
CALLS = [
    ("lookup_region", {"region": "emea"}),
    ("export_sales", {"region": "emea", "quarter": "2026-Q3"}),
    ("render_report", {"file": "sales-emea-2026-Q3.csv"}),
    ("publish_report", {"url": "https://r.example/1", "audience": "sales-leads"}),
]
RULES = {
    "fallback": "No rule for this request.",
    "rules": [
        {
            "when": {"model": MODEL, "system": "/keep the notes of an agent/"},
            "reply": {"text": "Done: the work so far.\nRemaining: the rest, after the wait."},
        },
        {
            "when": {"model": MODEL},
            "replies": [
                *(
                    {"reasoning": f"Next: {name}.", "tools": [{"name": name, "args": args}]}
                    for name, args in CALLS
                ),
                {"text": json.dumps(OUTCOME)},
            ],
        },
    ],
}
# How the fake LLM logs each request it answered (`--log-level info`): the rule that matched.
ANSWERED = re.compile(r'POST /v1/responses \[(json|stream)\] ".*?" -> (.+) \(\d+ms\)')


class OutsideLlm:
    """llm-mock-api on a port of its own; `log` is what it logged so far."""

    def __init__(self, port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}/v1"
        self._log = log

    def answered(self) -> list[tuple[str, str]]:
        """Each request answered: how (`json` or `stream`) and the rule that matched."""
        text = re.sub(r"\x1b\[[0-9;]*m", "", self._log.read_text())
        return [(m.group(1), m.group(2)) for m in ANSWERED.finditer(text)]


@pytest.fixture(scope="module")
@needs(SUBPROCESS)
def outside_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutsideLlm]:
    home = tmp_path_factory.mktemp("outside-llm")
    (home / "rules.json").write_text(json.dumps(RULES))
    port = service_port()
    log = home / "llm.log"
    command = [
        str(Path(sys.executable).with_name("llm-mock-api")), "start", "--port", str(port),
        "--rules", "rules.json", "--latency", "0", "--log-level", "info",
    ]  # fmt: skip
    with log.open("w") as out:
        # From its own directory: it reads ./config.json when there is one.
        process = subprocess.Popen(command, cwd=home, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not port_open(port):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"llm-mock-api did not listen: {log.read_text()}"
            time.sleep(0.1)
        yield OutsideLlm(port, log)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
@needs(TEMPORAL, SUBPROCESS)
def app_on_the_outside_llm(
    tmp_path_factory: pytest.TempPathFactory, outside_llm: OutsideLlm
) -> Iterator[Services]:
    env: dict[str, str | None] = {
        **documented_app(tmp_path_factory),
        "OPENAI_BASE_URL": outside_llm.url,
        "OPENAI_API_KEY": "test-key",
        # The model's text streamed to the gateway as it is written: the fake LLM's stream too.
        "WAITSTATE_MODEL_DELTAS": "1",
    }
    with Services(tmp_path_factory.mktemp("state"), env=env).up() as running:
        yield running


async def test_the_documented_app_runs_over_the_responses_api_of_an_outside_fake_llm(
    app_on_the_outside_llm: Services, outside_llm: OutsideLlm
) -> None:
    services = app_on_the_outside_llm
    run = await _run_approving_from_the_cli(services, "--model", f"openai-responses:{MODEL}")
    status = await services.status(run["run_id"])

    _check_the_story(run, status)
    assert run["output"] == OUTCOME
    assert status["model"] == f"openai-responses:{MODEL}"
    tools = [step["name"] for step in status["steps"] if step["kind"] == "tool"]
    assert [name for name in tools if name in dict(CALLS)] == [name for name, _ in CALLS]
    answered = outside_llm.answered()
    rules = [rule for _, rule in answered]
    assert "fallback" not in rules, answered
    # Every turn of the model (four calls and the answer) came from its sequence; a checkpoint
    # the run wrote before a wait (whether one is worth it depends on the wait) from its rule.
    turns = [rule for rule in rules if "system=" not in rule]
    assert turns == [f"{{model={MODEL}}}"] * (len(CALLS) + 1), answered
    assert {how for how, _ in answered} == {"stream"}, answered
