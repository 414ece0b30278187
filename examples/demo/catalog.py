"""The demo's catalog: every demo tool, wired to the demo systems it calls (`app.py` serves
them)."""

from __future__ import annotations

import httpx

from examples.demo.basic import demo_tools
from examples.demo.compliance import compliance_tools
from examples.demo.exports import ExportService, export_tool
from examples.demo.pipeline import EnrichmentPipeline, enrich_tool
from examples.demo.refunds import refund_tools
from waitstate import ToolSpec


def all_tools(http: httpx.AsyncClient, systems_url: str) -> list[ToolSpec]:
    """The demo tools plus the long and sync tools over the demo systems.

    Args:
        http: The client every tool calls its system with; the caller owns and closes it.
        systems_url: Where the demo systems are (`DEMO_SYSTEMS_URL`).
    """
    url = systems_url.rstrip("/")
    return [
        *demo_tools(),
        export_tool(ExportService(http, url)),
        enrich_tool(EnrichmentPipeline(http, url)),
        *compliance_tools(http, url),
        *refund_tools(http, url),
    ]


# The names of `all_tools`, for callers that validate names without building clients (the CLI).
# tests/examples/demo/test_catalog.py keeps the two in step.
TOOL_NAMES = (
    "calculate",
    "count_words",
    "utc_now",
    "start_export",
    "enrich_dataset",
    "verify_row_count",
    "upload_file",
    "notify_team",
    "check_claim",
    "issue_refund",
)
