"""The deliverer's own decisions: which reports share an Update, and what an unreachable
Temporal means to a sender."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client

from waitstate.auth.tokens import ResumeClaims
from waitstate.converter import DATA_CONVERTER
from waitstate.gateway.delivery import DeliveryRefused, TemporalDeliverer, update_id
from waitstate.schemas.operations import Completion, OperationError

DONE = Completion(status="succeeded", result={"rows": 7})
HALF = Completion(status="running", progress="50%")


def test_copies_of_a_final_report_share_one_update_whatever_the_sender_calls_them() -> None:
    assert update_id("op_1", DONE, "d1") == update_id("op_1", DONE, "d2", "whk_2")
    assert update_id("op_1", DONE, "d1") != update_id("op_2", DONE, "d1")
    failed = Completion(status="failed", error=OperationError(code="x", message="y"))
    assert update_id("op_1", DONE, "d1") != update_id("op_1", failed, "d1")


def test_progress_reports_are_known_by_the_senders_id_or_else_by_the_request() -> None:
    # Copies of one report (its retries) keep the sender's id: one Update.
    assert update_id("op_1", HALF, "d1", "whk_1") == update_id("op_1", HALF, "d2", "whk_1")
    # Two reports with the same body are two reports.
    assert update_id("op_1", HALF, "d1", "whk_1") != update_id("op_1", HALF, "d1", "whk_2")
    assert update_id("op_1", HALF, "d1") != update_id("op_1", HALF, "d2")


async def test_a_temporal_never_reached_is_a_503_not_a_crash(closed_port: int) -> None:
    client = await Client.connect(
        f"127.0.0.1:{closed_port}", lazy=True, data_converter=DATA_CONVERTER
    )
    deliverer = TemporalDeliverer(client, timeout=timedelta(seconds=5))
    claims = ResumeClaims("run-1", "op_1", "n" * 22, datetime.now(UTC) + timedelta(hours=1), "k")

    with pytest.raises(DeliveryRefused) as refused:
        await deliverer.complete(claims, HALF, "d1")

    assert (refused.value.status, refused.value.code) == (503, "temporal_unavailable")
