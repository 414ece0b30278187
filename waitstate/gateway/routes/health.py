"""Liveness and metrics: `GET /healthz` for probes, `GET /metrics` for Prometheus (deliveries
and refusals, and the fleet's run counts where the process counts them: see `fleet`)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from waitstate.gateway.gate import GateDep

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(gate: GateDep) -> Response:
    return Response(generate_latest(gate.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
