"""A server's sampling requests answered by the calling run's model, where the server's policy
allows it (`McpServer(sampling=...)`): in a plain call's rounds and in a task, on the real MCP
test server and the dev server; the answer counted in the run's usage. And what the policy
bounds, with a provider that records what it is asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers import accept, first_question, replays, scheduled_activities
from tests.mcp.mcp_app import task_events
from tests.mcp.runs import reports_apps, reports_run, started_call, tool_outcome
from waitstate.mcp import McpConfigError, McpServer, SamplingPolicy, parse_servers
from waitstate.mcp.sampling import Sampler, SamplingRefused
from waitstate.providers.base import Adapter, ModelRequest, ModelSettings
from waitstate.schemas import Message, ModelResponse, Usage
from waitstate.schemas.run import CALL_MODEL
from waitstate.tools.spec import JobAnswer
from waitstate.workflows.agent_run import AgentRunWorkflow


@pytest.mark.parametrize(
    ("model", "asked"),
    [
        ("scripted:mcp-summary-rounds", "summary_by_model"),  # input_required on a plain call
        ("scripted:mcp-summary-task", "summary_task"),  # a task's input request
    ],
)
async def test_a_servers_sampling_request_is_answered_by_the_runs_model(
    dev_env: WorkflowEnvironment, task_queue: str, reports_url: str, model: str, asked: str
) -> None:
    before = await task_events(reports_url)
    apps = reports_apps(reports_url, sampling=SamplingPolicy(max_tokens=30))
    async with reports_run(dev_env, task_queue, apps, model) as handle:
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        model_calls = (await scheduled_activities(handle)).count(CALL_MODEL)
    after = await task_events(reports_url)

    got = tool_outcome(result)
    assert got["status"] == "succeeded"
    # The model saw the server's one message (its prompt), not the run's conversation.
    assert got["result"] == {"result": "summary: q3 in one line (1)"}
    assert after[f"{asked} asked"] - before.get(f"{asked} asked", 0) == 1
    assert after[f"{asked} answered"] - before.get(f"{asked} answered", 0) == 1
    # The run's own model calls, and the answer to the server: the run's usage counts them all.
    assert state.usage.model_calls == model_calls + 1


@pytest.mark.parametrize(
    ("model", "asked", "key", "path"),
    [
        (
            "scripted:mcp-summary-rounds",
            "summary_by_model",
            "1/allow-sampling:draft",
            "mcp_sampling_allowed_in_rounds",
        ),
        # A task's keys are its server's (fastmcp-tasks surfaces its own for each request).
        (
            "scripted:mcp-summary-task",
            "summary_task",
            "allow-sampling:",
            "mcp_sampling_allowed_in_a_task",
        ),
    ],
)
async def test_a_person_lets_the_runs_model_answer_first_where_the_policy_asks(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    reports_url: str,
    model: str,
    asked: str,
    key: str,
    path: str,
) -> None:
    apps = reports_apps(reports_url, sampling=SamplingPolicy(max_tokens=30, approval=True))
    async with reports_run(dev_env, task_queue, apps, model) as handle:
        question = await first_question(handle, "leave for the run's model")
        before = await task_events(reports_url)
        outcome = await accept(handle, question, {"allow": True})
        result = await handle.result()
        state = await handle.query(AgentRunWorkflow.status)
        model_calls = (await scheduled_activities(handle)).count(CALL_MODEL)
        await replays(handle, path)

    assert question.key.startswith(key)
    assert question.message == (
        "MCP server reports asks the run's model to write (at most 30 tokens): 'q3'. Let it answer?"
    )
    assert (outcome.accepted, outcome.delivered) == (True, True)
    assert (
        before.get(f"{asked} answered", 0)
        == (await task_events(reports_url)).get(f"{asked} answered", 0) - 1
    )  # answered once the person allowed it
    assert tool_outcome(result)["result"] == {"result": "summary: q3 in one line (1)"}
    assert state.usage.model_calls == model_calls + 1


async def test_a_request_a_person_refused_is_left_open_and_the_model_not_asked(
    reports_url: str, tmp_path: Path
) -> None:
    provider = Recording()
    server = McpServer("reports", url=reports_url, sampling=SamplingPolicy(approval=True))
    assert server.sampling is not None
    sampler = Sampler(provider, "m-1", server.sampling, "reports")
    started = await started_call(
        server, tmp_path, "summary_by_model", {"topic": "q3"}, sampler=sampler
    )
    try:
        asked = await started.status()
        [question] = asked.questions or []
        await started.answer(_allow(question.key, False))
        refused = await started.status()
        await started.answer(_allow(question.key, True))  # the first decision stands
        still = await started.status()
    finally:
        await started.backend.aclose()

    assert question.key == "1/allow-sampling:draft"
    assert refused.status == "input_required" and not refused.questions
    assert "not answered by this client: sampling/createMessage" in (refused.progress or "")
    assert still == refused
    assert provider.asked == [] and sampler.usage == Usage()


def _allow(key: str, allow: bool) -> JobAnswer:
    return JobAnswer(key=key, action="accept", content={"allow": allow}, responder="ana")


class Recording(Adapter):
    """A provider that records what it is asked, and answers `reply`."""

    name = "recording"

    def __init__(self, reply: str = "a summary") -> None:
        self.reply = reply
        self.asked: list[tuple[str, list[Message], ModelSettings | None]] = []

    async def answer(self, request: ModelRequest) -> ModelResponse:
        assert not request.tools
        self.asked.append((request.system_prompt, list(request.messages), request.settings))
        message = Message(role="assistant", content=self.reply)
        return ModelResponse(message=message, usage=Usage(input_tokens=12, output_tokens=3))

    async def aclose(self) -> None:
        pass


def _request(text: Any = "q3", **params: Any) -> dict[str, Any]:
    content = {"type": "text", "text": text} if isinstance(text, str) else text
    return {
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": content}],
            "maxTokens": 500,
            **params,
        },
    }


async def test_an_answer_is_the_models_within_the_policy_and_counted() -> None:
    provider = Recording()
    sampler = Sampler(provider, "m-1", SamplingPolicy(max_tokens=64), "reports")
    answer = await sampler.answer(_request(systemPrompt="Be brief.", temperature=0.2))
    again = await sampler.answer(_request(systemPrompt="Be brief.", temperature=0.2))

    assert answer == {
        "role": "assistant",
        "content": {"type": "text", "text": "a summary"},
        "model": "m-1",
        "stopReason": "endTurn",
    }
    assert again == answer  # the same request again: the same answer, the model not asked
    [(system_prompt, messages, settings)] = provider.asked
    assert system_prompt == "Be brief."
    assert [(m.role, m.content) for m in messages] == [("user", "q3")]
    assert settings == ModelSettings(temperature=0.2, max_tokens=64)  # 500 asked, 64 allowed
    assert sampler.usage == Usage(model_calls=1, input_tokens=12, output_tokens=3)


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        ({"method": "sampling/createMessage", "params": {}}, "not a well-formed"),
        (_request({"type": "image", "data": "AAAA", "mimeType": "image/png"}), "only text"),
        (_request("x" * 40_000), "a prompt of 40000 characters"),
        (_request(tools=[{"name": "t", "inputSchema": {"type": "object"}}]), "with tools"),
    ],
)
async def test_a_request_the_policy_does_not_answer_is_refused(
    request_: dict[str, Any], why: str
) -> None:
    provider = Recording()
    sampler = Sampler(provider, "m-1", SamplingPolicy(), "reports")
    with pytest.raises(SamplingRefused, match=why):
        await sampler.answer(request_)
    assert provider.asked == []
    assert sampler.usage == Usage()


async def test_a_poll_answers_at_most_its_policys_requests() -> None:
    provider = Recording()
    sampler = Sampler(provider, "m-1", SamplingPolicy(max_requests=2), "reports")
    await sampler.answer(_request("one"))
    await sampler.answer(_request("two"))
    with pytest.raises(SamplingRefused, match="2 sampling requests answered"):
        await sampler.answer(_request("three"))
    assert len(provider.asked) == 2


def test_sampling_is_declared_per_server_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WAITSTATE_MCP_SAMPLING_REPORTS", "256")
    [reports, other] = parse_servers("reports=http://a/mcp,other=http://b/mcp")
    assert reports.sampling == SamplingPolicy(max_tokens=256)
    assert other.sampling is None
    monkeypatch.setenv("WAITSTATE_MCP_SAMPLING_REPORTS", "lots")
    with pytest.raises(McpConfigError, match="the most tokens an answer may take"):
        parse_servers("reports=http://a/mcp")
