"""Declaring MCP servers: the environment's form, names, headers read when a call is made, and
grants checked against the declared servers."""

from __future__ import annotations

import pytest

from waitstate.apps import AppError, load_apps
from waitstate.mcp import McpConfigError, McpServer, McpServers, granted, parse_servers


def test_servers_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITSTATE_MCP_HEADERS_REPORTS_EU", "Authorization=REPORTS_TOKEN")

    servers = parse_servers(
        "reports-eu=http://127.0.0.1:9000/mcp, local = stdio:python -m local_server,"
    )

    assert servers == [
        McpServer(
            "reports-eu",
            url="http://127.0.0.1:9000/mcp",
            headers_from_env={"Authorization": "REPORTS_TOKEN"},
        ),
        McpServer("local", command="python -m local_server"),
    ]


@pytest.mark.parametrize("value", ["reports", "reports=", "=http://x/mcp"])
def test_an_entry_that_is_not_name_equals_target_is_refused(value: str) -> None:
    with pytest.raises(McpConfigError):
        parse_servers(value)


@pytest.mark.parametrize("name", ["a__b", "", "has space", "dot.ted"])
def test_a_server_name_must_be_plain(name: str) -> None:
    with pytest.raises(McpConfigError):
        McpServer(name, url="http://x/mcp")


def test_a_server_has_a_url_or_a_command() -> None:
    with pytest.raises(McpConfigError, match="a url or a command"):
        McpServer("both", url="http://x/mcp", command="serve")
    with pytest.raises(McpConfigError, match="a url or a command"):
        McpServer("neither")


def test_headers_are_read_from_the_environment_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = McpServer("r", url="http://x/mcp", headers_from_env={"Authorization": "R_TOKEN"})
    monkeypatch.delenv("R_TOKEN", raising=False)
    with pytest.raises(McpConfigError, match=r"needs \$R_TOKEN"):
        server.headers()

    monkeypatch.setenv("R_TOKEN", "Bearer abc")

    assert server.headers() == {"Authorization": "Bearer abc"}
    assert "abc" not in repr(server)


def test_a_server_declared_twice_is_refused() -> None:
    servers = McpServers([McpServer("r", url="http://x/mcp")])
    with pytest.raises(McpConfigError, match="declared twice"):
        servers.add(McpServer("r", url="http://y/mcp"))


def test_grants_match_a_servers_own_tool_names() -> None:
    assert granted("render_report", ["render_*"])
    assert granted("render_report", ["*"])
    assert not granted("delete_dataset", ["render_*", "add"])


def test_the_apps_refuse_a_grant_of_an_undeclared_server() -> None:
    apps = load_apps([], mcp_servers=[McpServer("reports", url="http://x/mcp")])

    apps.check_tools(["reports__render", "reports__*"])
    with pytest.raises(AppError, match="no MCP server 'crm' is declared.*declared: reports"):
        apps.check_tools(["crm__lookup"])
