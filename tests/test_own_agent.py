"""docs/agents.md's "Your own agent", run as written: its package, outside the repository,
served by `WAITSTATE_APPS=reports.app:app scripts/services.py up`, its agent run with `starter.py run
--agent report-builder ... --wait --json` through a webhook, a poll and an approval given from
the CLI; once with the package's own script for the model, once with each OpenAI wire protocol
(Chat Completions, Responses) through the real SDK against the local stand-in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from tests.docs import files_shown, page, section
from tests.helpers import eventually
from tests.rigs import Services
from tests.tiers import SUBPROCESS, TEMPORAL, needs
from waitstate.testing.wire_server import (
    WireServer,
    openai_text,
    openai_tool_calls,
    responses_function_calls,
    responses_text,
)

TASK = "Build the EMEA sales report for 2026-Q3"
RUN_WITHIN = 90.0
Builder = Callable[..., dict[str, Any]]
# Each OpenAI protocol's builders of a text reply and of a reply calling tools; over the
# Responses API, a reasoning model's (each call comes with its reasoning, which must go back).
PROTOCOLS: dict[str, tuple[Builder, Builder]] = {
    "openai": (openai_text, openai_tool_calls),
    "openai-responses": (responses_text, partial(responses_function_calls, reasoning="enc")),
}


def shown_files() -> dict[str, str]:
    """The files docs/agents.md's "Your own agent" section shows, by path."""
    return files_shown(section(page("docs/agents.md"), "## Your own agent"))


def documented_app(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The app the section shows (one file, reports/app.py), written out as a package of its
    own: the environment a worker serves it in."""
    files = shown_files()
    assert list(files) == ["reports/app.py"]
    package = tmp_path_factory.mktemp("reports-app")
    (package / "reports").mkdir()
    (package / "reports" / "__init__.py").write_text("")
    for path, text in files.items():
        (package / path).write_text(text)
    return {"PYTHONPATH": str(package), "WAITSTATE_APPS": "reports.app:app"}


@pytest.fixture(scope="module")
def wire() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


@pytest.fixture(scope="module")
@needs(TEMPORAL, SUBPROCESS)
def own_app(tmp_path_factory: pytest.TempPathFactory, wire: WireServer) -> Iterator[Services]:
    env: dict[str, str | None] = {
        **documented_app(tmp_path_factory),
        "OPENAI_BASE_URL": wire.openai_base_url,
        "OPENAI_API_KEY": "test-key",
    }
    with Services(tmp_path_factory.mktemp("state"), env=env).up() as running:
        yield running


async def _run_approving_from_the_cli(services: Services, *options: str) -> dict[str, Any]:
    """`run --agent report-builder TASK --wait --json`, approved with `pending` and `approve`
    as the page says; the run's JSON."""
    run = asyncio.create_task(
        services.starter("run", "--agent", "report-builder", TASK, "--wait", "--json", *options)
    )

    async def open_request() -> list[dict[str, Any]]:
        listed = await services.starter("pending", "--json")
        assert listed.returncode == 0, listed.stderr
        return [p for p in json.loads(listed.stdout) if p["tool"] == "publish_report"]

    [pending] = await eventually(open_request, "the publish_report approval", RUN_WITHIN)
    approved = await services.starter("approve", pending["run_id"], "--reviewer", "dana")
    assert approved.returncode == 0, approved.stderr
    done = await run
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _check_the_story(run: dict[str, Any], status: dict[str, Any]) -> None:
    ops = {op["tool"]: op for op in status["operations"].values()}
    assert ops["export_sales"]["completion"] == "callback"
    assert ops["export_sales"]["status"] == "succeeded"
    assert ops["render_report"]["completion"] == "poll"
    assert ops["render_report"]["status"] == "succeeded"
    [request] = status["approvals"].values()
    assert (request["tool"], request["status"]) == ("publish_report", "approved")
    assert request["decision"]["reviewer"] == "dana"
    assert status["agent"] == "report-builder"
    assert run["status"] == "completed"


async def test_the_documented_app_runs_with_its_own_script(own_app: Services) -> None:
    run = await _run_approving_from_the_cli(own_app)
    status = await own_app.status(run["run_id"])

    _check_the_story(run, status)
    assert run["output"]["region"] == "emea"
    assert run["output"]["rows"] == 1200
    assert run["output"]["published"] is True
    assert run["output"]["url"].startswith("https://reports.example/render-")
    assert status["model"] == "scripted:report-builder"
    listed = await own_app.starter("list", "--json")
    assert {"run_id": run["run_id"], "agent": "report-builder"}.items() <= next(
        r for r in json.loads(listed.stdout) if r["run_id"] == run["run_id"]
    ).items()


@pytest.mark.parametrize("provider", list(PROTOCOLS))
async def test_the_documented_app_runs_with_a_model_over_an_openai_protocol(
    own_app: Services, wire: WireServer, provider: str
) -> None:
    text, calls = PROTOCOLS[provider]
    model = f"test-{provider}"  # the module's runs share the wire server
    outcome = {"region": "emea", "rows": 1200, "url": "https://r.example/1", "published": True}
    wire.enqueue_for(
        model,
        calls([("c1", "lookup_region", '{"region": "emea"}')]),
        calls([("c2", "export_sales", '{"region": "emea", "quarter": "2026-Q3"}')]),
        text("Done: region and export started. Remaining: render, publish."),  # checkpoint
        calls([("c3", "render_report", '{"file": "sales-emea-2026-Q3.csv"}')]),
        calls([("c4", "publish_report", '{"url": "https://r.example/1", "audience": "sales-leads"}')]),
        text("Done: rendered. Remaining: publish once approved."),  # checkpoint
        text('{"region": "emea", "rows": "many"}'),  # fails the output type
        text(json.dumps(outcome)),
    )  # fmt: skip
    run = await _run_approving_from_the_cli(own_app, "--model", f"{provider}:{model}")
    status = await own_app.status(run["run_id"])

    _check_the_story(run, status)
    assert run["output"] == outcome
    assert status["model"] == f"{provider}:{model}"
    sent_back = [s for s in status["steps"] if s["detail"].startswith("answer sent back")]
    assert len(sent_back) == 1 and "rows" in sent_back[0]["detail"]
    requests = [r.body for r in wire.requests if r.body.get("model") == model]
    assert len(requests) == 8
    told = requests[0]["messages"][0] if provider == "openai" else requests[0]["instructions"]
    assert "ReportOutcome" in json.dumps(told)  # the schema, told
    if provider == "openai-responses":
        # Each call's reasoning went back with it, right before it, on every later turn of
        # the conversation (the checkpoints are conversations of their own).
        last = [(i.get("type"), i.get("call_id")) for i in requests[-1]["input"]]
        for call in ("c1", "c2", "c3", "c4"):
            at = last.index(("function_call", call))
            assert last[at - 1] == ("reasoning", None)
        assert all(r["store"] is False for r in requests)
