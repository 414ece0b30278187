"""waitstate's MCP client under the MCP conformance suite's client scenarios, for
`tests/mcp/test_conformance_client.py`:

    node .../dist/index.js client --scenario tools_call \\
        --command ".venv/bin/python -m tests.mcp.conformance_client"

The suite starts a mock server of the scenario's, runs the command (from the repository's root)
with the server's URL as its last argument, the scenario's name in `MCP_CONFORMANCE_SCENARIO`
and its test data, if any, in `MCP_CONFORMANCE_CONTEXT`, then judges what the server saw.

Each scenario's script is the suite's reference client's (`examples/clients/typescript/
everything-client.ts` in its repository) where it has one: list the tools, call the first, echo
a schema, make the calls the context names; otherwise, use what the scenario's server offers.
It is carried out only the way the worker's MCP activities (`activities/mcp.py`) talk to a
server, never with a client of its own: the tools are listed on a session of their own
(`McpServer.connect()`, `list_tools()` and the resource and prompt tools the server is
`offered`, as `list_mcp_tools` does), and each call is made on a new session offering the
tasks extension (`McpServer.connect(extensions=[Tasks()])`, then `session.call_tool(name,
arguments, allow_input_required=True, allow_claimed=True)` as a tool call does, or the resource
and prompt tools' `answer`). A scenario whose calls ask for input in rounds
(`sep-2322-client-request-state`) runs the worker's own code: the listing and call activities
(`McpActivities`, in an `ActivityEnvironment`), then, for a call that became an operation, the
backend its poll and answer activities use (`McpTaskBackend.status` and `answer`), over a blob
store of its own. So the suite judges what a run sends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from temporalio.testing import ActivityEnvironment

from waitstate.activities.mcp import McpActivities, learn_header_params, read_listing
from waitstate.activities.mcp_resources import (
    GET_PROMPT,
    LIST_PROMPTS,
    LIST_RESOURCES,
    READ_RESOURCE,
    answer,
    offered,
)
from waitstate.blobs import LocalBlobStore
from waitstate.mcp import McpServer, McpServers
from waitstate.mcp.extension import Tasks
from waitstate.mcp.tasks import McpTaskBackend
from waitstate.schemas import ToolCall, ToolCallInput, ToolDefinition
from waitstate.schemas.builtin import MCP_SEPARATOR
from waitstate.schemas.operations import Completion
from waitstate.schemas.run import McpListInput
from waitstate.tools.spec import JobAnswer

SCENARIO = "MCP_CONFORMANCE_SCENARIO"
CONTEXT = "MCP_CONFORMANCE_CONTEXT"
# What the reference client calls the first tool with in the basic scenarios.
BASIC_ARGUMENTS = {"a": 2, "b": 3}
# json-schema-2020-12-preservation: the tool whose input schema is sent back, and the tool
# that echoes it.
FOCAL_TOOL = "json_schema_2020_12_tool"
ECHO_TOOL = "json_schema_echo"
# How many times an operation is checked at most (every 0.1 s) before the script gives up.
MAX_CHECKS = 100

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Worker:
    """A server as a worker declares it, and what the worker's activities do with it."""

    server: McpServer
    # Each listed tool's input schema, as the run's listing keeps it for its calls.
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)

    async def list_tools(self) -> tuple[list[Any], list[str]]:
        """The server's tools, and the names of the resource and prompt tools it is offered
        (less any its own tools already name), as the listing activity gets them."""
        async with self.server.connect() as client:
            tools = list((await client.list_tools()).tools)
            self.schemas.update({tool.name: tool.input_schema for tool in tools})
            own = {tool.name for tool in tools}
            reading = [d.name for d in await offered(self.server.name, client) if d.name not in own]
        log.info("listed %s and %s", sorted(own), reading)
        return tools, reading

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call a tool as the call activity does, on a session of the call's own."""
        async with self.server.connect(extensions=[Tasks()]) as client:
            await learn_header_params(client, name, self.schemas.get(name, {}))
            result = await client.session.call_tool(
                name, arguments, allow_input_required=True, allow_claimed=True
            )
        log.info("called %s: %s", name, type(result).__name__)
        return result

    async def read(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call a resource or prompt tool (`resources__read`...) as the call activity does.

        Raises:
            ValueError: the arguments were wrong, as the model would be told.
        """
        async with self.server.connect(extensions=[Tasks()]) as client:
            text, wrong = await answer(client, tool, arguments)
        log.info("called %s: %s", tool, text[:200])
        if wrong:
            raise ValueError(f"{tool}: {text}")
        return text


Script = Callable[[Worker, dict[str, Any]], Coroutine[Any, Any, None]]


async def call_every_tool_answering(worker: Worker, context: dict[str, Any]) -> None:
    """What a run does: list the tools (the `list_mcp_tools` activity), call each with no
    arguments (the call activity, `McpActivities.call`), then wait for every call that became
    an operation, as its poll and answer activities do (`McpTaskBackend.status` and `answer`,
    over the worker's blob store): a call that asked for input in rounds is answered, a
    person accepting each question with the form's defaults, and sent again until it ends.
    So the calls made between a call's rounds are made while its rounds are open."""
    with tempfile.TemporaryDirectory(prefix="conformance-blobs-") as directory:
        blobs = LocalBlobStore(directory)
        activities = McpActivities(McpServers([worker.server]), blobs)
        env = ActivityEnvironment()
        grants = [f"{worker.server.name}{MCP_SEPARATOR}*"]
        listing = await env.run(activities.list_mcp_tools, McpListInput(grants=grants))
        tools = await read_listing(blobs, listing.ref)
        operations = []
        for n, (name, tool) in enumerate(tools.items()):
            call = ToolCall(id=f"call_{n}", name=name, arguments="{}")
            input = ToolCallInput(call=call)
            result = await env.run(activities.call, input, tool)
            log.info("called %s: %s", name, result.operation or result.content[:200])
            if result.operation is not None:
                operations.append((name, result.operation.job_id))
        backend = McpTaskBackend(worker.server, blobs)
        try:
            for name, job_id in operations:
                log.info("%s ended: %s", name, await _answered(backend, job_id))
        finally:
            await backend.aclose()


async def _answered(backend: McpTaskBackend, job_id: str) -> Completion:
    """The operation's end, each question it asks accepted with its form's defaults.

    Raises:
        TimeoutError: it did not end within `MAX_CHECKS` checks.
    """
    for _ in range(MAX_CHECKS):
        status = await backend.status(job_id)
        if status.status in ("succeeded", "failed"):
            return status
        for question in status.questions or ():
            content = _defaults(question.requested_schema)
            log.info("answering %s with %s", question.key, content)
            await backend.answer(
                job_id, JobAnswer(key=question.key, action="accept", content=content)
            )
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{job_id} did not end within {MAX_CHECKS} checks")


def _defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """A form's answer with each property's default, or a value of its type."""
    by_type: dict[str, Any] = {"boolean": True, "string": "", "integer": 0, "number": 0}
    return {
        name: spec.get("default", by_type.get(spec.get("type", "")))
        for name, spec in (schema.get("properties") or {}).items()
        if isinstance(spec, dict)
    }


async def list_tools(worker: Worker, context: dict[str, Any]) -> None:
    """List the tools, and call none (the scenario's server answers nothing else)."""
    await worker.list_tools()


async def call_first_tool(worker: Worker, context: dict[str, Any]) -> None:
    """List the tools and call the first with `BASIC_ARGUMENTS`."""
    tools, _ = await worker.list_tools()
    if tools:
        await worker.call(tools[0].name, BASIC_ARGUMENTS)


async def call_every_tool(worker: Worker, context: dict[str, Any]) -> None:
    """List the tools and call each, with no arguments: what the server sees shows which the
    client kept and what it sent with each call."""
    tools, _ = await worker.list_tools()
    for tool in tools:
        await worker.call(tool.name, {})


async def use_everything(worker: Worker, context: dict[str, Any]) -> None:
    """Call every tool, then, where the server is offered them, read each resource it lists
    and get each prompt, as a model would with the resource and prompt tools."""
    tools, reading = await worker.list_tools()
    for tool in tools:
        await worker.call(tool.name, {})
    if LIST_RESOURCES in reading:
        for resource in json.loads(await worker.read(LIST_RESOURCES, {})):
            await worker.read(READ_RESOURCE, {"uri": resource["uri"]})
    if LIST_PROMPTS in reading:
        for prompt in json.loads(await worker.read(LIST_PROMPTS, {})):
            await worker.read(GET_PROMPT, {"name": prompt["name"]})


async def make_the_calls_given(worker: Worker, context: dict[str, Any]) -> None:
    """List the tools, then make the calls the scenario's context names, in order."""
    await worker.list_tools()
    for call in context.get("toolCalls", []):
        await worker.call(call["name"], call["arguments"])


async def echo_schema(worker: Worker, context: dict[str, Any]) -> None:
    """Send `FOCAL_TOOL`'s input schema back through `ECHO_TOOL`, as a run's listing keeps it
    for the model (a `ToolDefinition`'s parameters, stored as JSON)."""
    tools, _ = await worker.list_tools()
    focal = next((tool for tool in tools if tool.name == FOCAL_TOOL), None)
    if focal is None:
        raise LookupError(f"the server lists no {FOCAL_TOOL}")
    listed = ToolDefinition(name=FOCAL_TOOL, description="", parameters=focal.input_schema)
    kept = ToolDefinition.model_validate_json(listed.model_dump_json())
    await worker.call(ECHO_TOOL, {"schema": kept.parameters})


# Every scenario this client follows; `tests/mcp/test_conformance_client.py` says which of them
# waitstate passes, and why the others are not run.
SCRIPTS: dict[str, Script] = {
    "initialize": call_first_tool,
    "tools_call": call_first_tool,
    "sse-retry": call_every_tool,
    "request-metadata": list_tools,
    "json-schema-ref-no-deref": list_tools,
    "json-schema-2020-12-preservation": echo_schema,
    "http-standard-headers": use_everything,
    "http-invalid-tool-headers": call_every_tool,
    "http-custom-headers": make_the_calls_given,
    "sep-2322-client-request-state": call_every_tool_answering,
}


def main(argv: list[str]) -> int:
    """Follow the script of the scenario `MCP_CONFORMANCE_SCENARIO` names against the server
    at the URL last in `argv`; 2 for a scenario this client has no script for."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    scenario = os.environ.get(SCENARIO, "")
    script = SCRIPTS.get(scenario)
    usage = f"usage: {SCENARIO}=SCENARIO python -m tests.mcp.conformance_client SERVER_URL"
    if script is None:
        known = ", ".join(sorted(SCRIPTS))
        print(
            f"{usage}\nunknown scenario {scenario!r}: this client follows {known}", file=sys.stderr
        )
        return 2
    if len(argv) < 2:
        print(usage, file=sys.stderr)
        return 2
    context = json.loads(os.environ.get(CONTEXT) or "{}")
    asyncio.run(script(Worker(McpServer("conformance", url=argv[-1])), context))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
