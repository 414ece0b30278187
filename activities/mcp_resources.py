"""A server's resources and prompts, as tools a run may be granted: `<server>__resources__list`,
`__resources__read`, `__prompts__list` and `__prompts__get`, listed where the server offers
resources or prompts (its capabilities), granted as its tools are (`reports__resources__*`, or
`reports__*`), and answered with what the server says, as text for the model.

All four only read: none asks for approval unless the operator names it
(`require_approval`), and each is called again freely after a failure. What a server answers
came from outside: each answer is bounded (`MAX_ANSWER_CHARS`), a binary resource is described,
never inlined, and a listing stops after `MAX_LISTED` entries.
"""

from __future__ import annotations

import json
from typing import Any

from waitstate.schemas import ToolDefinition

LIST_RESOURCES = "resources__list"
READ_RESOURCE = "resources__read"
LIST_PROMPTS = "prompts__list"
GET_PROMPT = "prompts__get"
MAX_ANSWER_CHARS = 50_000
MAX_LISTED = 500  # entries of a listing, over its pages
_NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
_TOOLS = {
    LIST_RESOURCES: (
        "resources",
        "List the resources of MCP server {server}: their URIs, names and descriptions.",
        _NO_ARGUMENTS,
    ),
    READ_RESOURCE: (
        "resources",
        "Read a resource of MCP server {server} by its URI (from {server}__resources__list).",
        {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
            "required": ["uri"],
            "additionalProperties": False,
        },
    ),
    LIST_PROMPTS: (
        "prompts",
        "List the prompts of MCP server {server}: their names, descriptions and arguments.",
        _NO_ARGUMENTS,
    ),
    GET_PROMPT: (
        "prompts",
        "Get a prompt of MCP server {server} by name, with its arguments filled in: the "
        "messages it makes.",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The prompt's name."},
                "arguments": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "Its arguments, by name (each a string).",
                },
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    ),
}


async def offered(server: str, client: Any) -> list[ToolDefinition]:
    """The resource and prompt tools of `server` (its own names for them, which the run's
    grants match): of the kinds its capabilities declare and it has any of (a server may
    declare prompts and have none).

    Raises:
        Exception: the server refused a listing, or could not be reached.
    """
    declared = client.server_capabilities
    kinds = set()
    if (
        getattr(declared, "resources", None) is not None
        and (await client.list_resources()).resources
    ):
        kinds.add("resources")
    if getattr(declared, "prompts", None) is not None and (await client.list_prompts()).prompts:
        kinds.add("prompts")
    return [
        ToolDefinition(name=name, description=text.format(server=server), parameters=schema)
        for name, (kind, text, schema) in _TOOLS.items()
        if kind in kinds
    ]


async def answer(client: Any, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    """What the server says to the call, as text, and whether it is the model's error (an
    argument missing or of the wrong type).

    Raises:
        Exception: the server refused the request, or could not be reached.
    """
    if tool == LIST_RESOURCES:
        listed = await _pages(client.list_resources, "resources")
        entries = [
            _present(uri=str(r.uri), name=r.name, description=r.description, mime_type=r.mime_type)
            for r in listed
        ]
        return _bounded(json.dumps(entries, ensure_ascii=False)), False
    if tool == LIST_PROMPTS:
        listed = await _pages(client.list_prompts, "prompts")
        entries = [
            _present(
                name=p.name,
                description=p.description,
                arguments=[
                    _present(name=a.name, description=a.description, required=a.required)
                    for a in p.arguments or []
                ],
            )
            for p in listed
        ]
        return _bounded(json.dumps(entries, ensure_ascii=False)), False
    if tool == READ_RESOURCE:
        uri = arguments.get("uri")
        if not isinstance(uri, str) or not uri:
            return "send the resource's URI as `uri` (a string)", True
        read = await client.read_resource(uri)
        return _bounded("\n\n".join(_content(c) for c in read.contents)), False
    name, filled = arguments.get("name"), arguments.get("arguments") or {}
    if not isinstance(name, str) or not name:
        return "send the prompt's name as `name` (a string)", True
    if not isinstance(filled, dict) or not all(isinstance(v, str) for v in filled.values()):
        return "send the prompt's `arguments` as an object of strings", True
    prompt = await client.get_prompt(name, filled)
    lines = [f"{m.role}: {_content(m.content)}" for m in prompt.messages]
    return _bounded("\n\n".join(lines)), False


async def _pages(listing: Any, field: str) -> list[Any]:
    """Every entry of a paged listing, up to MAX_LISTED."""
    entries: list[Any] = []
    cursor = None
    while len(entries) < MAX_LISTED:
        page = await listing(cursor=cursor)
        entries += getattr(page, field)
        cursor = page.next_cursor
        if not cursor:
            break
    return entries[:MAX_LISTED]


def _content(content: Any) -> str:
    """A content block or a resource's contents, as text: text as it is, anything else by what
    it is (a blob, an image) and never inlined."""
    text = getattr(content, "text", None)
    if isinstance(text, str):
        return text
    resource = getattr(content, "resource", None)  # an embedded resource
    if resource is not None:
        return _content(resource)
    kind = getattr(content, "type", None) or "blob"
    mime = getattr(content, "mime_type", None) or "unknown type"
    return f"[{kind} content ({mime}), not shown]"


def _present(**fields: Any) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value not in (None, "", [])}


def _bounded(text: str) -> str:
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    return text[:MAX_ANSWER_CHARS] + f"\n[cut: the server's answer was {len(text)} characters]"
