"""The compliance tools end to end through a ToolRegistry, against the real demo systems."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from examples.demo.catalog import all_tools
from examples.demo.compliance import compliance_tools
from examples.demo.exports import ExportArgs, ExportService
from examples.demo.services import ServiceError
from examples.systems import serving
from tests.helpers import call_tool as call
from tests.helpers import eventually
from waitstate.schemas.operations import Completion
from waitstate.tools.spec import StartContext, ToolRegistry


@pytest.fixture
def registry(http: httpx.AsyncClient, systems_url: str) -> ToolRegistry:
    return ToolRegistry(compliance_tools(http, systems_url))


async def exported(http: httpx.AsyncClient, systems_url: str) -> dict[str, Any]:
    """Run an export to the end; its result."""
    service = ExportService(http, systems_url)
    job = await service.start(
        ExportArgs(dataset="transactions", period="2025-Q3"),
        StartContext(idempotency_key="wf/call-export", operation_id="op_1"),
    )

    async def ended() -> Completion | None:
        completion = await service.status(job.job_id)
        return completion if completion.status != "running" else None

    completion = await eventually(ended, "the export to end")
    assert completion.status == "succeeded"
    result: dict[str, Any] = completion.result
    return result


async def test_verify_upload_and_notify_end_to_end(
    registry: ToolRegistry, http: httpx.AsyncClient, systems_url: str
) -> None:
    export = await exported(http, systems_url)

    verified = await call(
        registry, "verify_row_count", file=export["file"], expected_rows=export["rows"]
    )
    mismatch = await call(
        registry, "verify_row_count", file=export["file"], expected_rows=export["rows"] + 1
    )
    uploaded = await call(registry, "upload_file", file=export["file"], folder="compliance")
    notified = await call(
        registry, "notify_team", team="compliance", message="Q3 transactions are filed"
    )

    assert verified == ({"file": export["file"], "rows": export["rows"], "matches": True}, False)
    assert mismatch == ({"file": export["file"], "rows": export["rows"], "matches": False}, False)
    assert uploaded == ({"path": "compliance/transactions-2025-Q3.csv"}, False)
    assert notified == ({"id": "ntf_1"}, False)
    folder = (await http.get(f"{systems_url}/folders/compliance/files")).json()
    assert folder == [
        {
            "path": "compliance/transactions-2025-Q3.csv",
            "file": export["file"],
            "rows": export["rows"],
        }
    ]
    assert (await http.get(f"{systems_url}/notifications")).json() == [
        {"id": "ntf_1", "team": "compliance", "message": "Q3 transactions are filed"}
    ]


async def test_refusals_are_errors_the_model_reads(
    registry: ToolRegistry, http: httpx.AsyncClient, systems_url: str
) -> None:
    unknown_file = await call(registry, "verify_row_count", file="exports/x.csv", expected_rows=1)
    not_exported = await call(registry, "upload_file", file="exports/x.csv", folder="compliance")
    export = await exported(http, systems_url)
    bad_folder = await call(registry, "upload_file", file=export["file"], folder="Compliance Dept")
    bad_args = await call(registry, "verify_row_count", file="exports/x.csv")

    assert unknown_file == ("export service: no export produced 'exports/x.csv'", True)
    assert not_exported == ("compliance folder: no export produced 'exports/x.csv'", True)
    assert bad_folder[1] is True
    assert "folder must be 1-100 lowercase letters" in bad_folder[0]
    assert bad_args[1] is True
    assert "expected_rows" in bad_args[0]
    assert (await http.get(f"{systems_url}/folders/compliance/files")).json() == []


async def test_a_server_error_propagates_for_the_activity_to_retry(
    http: httpx.AsyncClient,
) -> None:
    async with serving(_failing_app()) as url:
        registry = ToolRegistry(compliance_tools(http, url))
        with pytest.raises(ServiceError, match="notifications answered 500"):
            await call(registry, "notify_team", team="t", message="m")


def test_compliance_tools_are_sync_tools_with_described_arguments(
    registry: ToolRegistry,
) -> None:
    assert registry.names() == ["notify_team", "upload_file", "verify_row_count"]
    for name in registry.names():
        spec = registry.get(name)
        assert spec is not None
        assert spec.kind == "sync"
        properties = spec.definition().parameters["properties"]
        assert all(prop.get("description") for prop in properties.values())


async def test_the_catalog_points_every_system_tool_at_the_settings_url(
    http: httpx.AsyncClient, systems_url: str
) -> None:
    registry = ToolRegistry(all_tools(http, systems_url))
    export = await exported(http, systems_url)

    verified = await call(
        registry, "verify_row_count", file=export["file"], expected_rows=export["rows"]
    )

    assert registry.names() == [
        "calculate",
        "check_claim",
        "count_words",
        "enrich_dataset",
        "issue_refund",
        "notify_team",
        "start_export",
        "upload_file",
        "utc_now",
        "verify_row_count",
    ]
    start_export, enrich = registry.get("start_export"), registry.get("enrich_dataset")
    assert start_export is not None and start_export.long is not None
    assert enrich is not None and enrich.long is not None
    assert (start_export.long.completion, enrich.long.completion) == ("callback", "poll")
    assert verified[0]["matches"] is True


def _failing_app() -> FastAPI:
    app = FastAPI()

    @app.post("/notifications")
    async def broken() -> JSONResponse:
        return JSONResponse({"detail": "database is down"}, status_code=500)

    return app
