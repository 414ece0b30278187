"""The client's Updates against a stand-in for Temporal: what a caller's retry under the same
key gets (the first outcome, for a caller without a delivery id), what a delivery with one is
told of a copy, and what an unknown outcome names as the key. Each failure Temporal or a run
gives is followed to its HTTP answer through the gateway in tests/gateway/test_replies.py, and
against the dev server in tests/gateway/test_real_server.py and test_retried_doors.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest
from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError

from tests.gateway.replies import FakeClient, FakeHandle
from waitstate.client import AlreadyApplied, OutcomeUnknown, WaitstateClient
from waitstate.schemas.approvals import DecideInput, DecideOutcome
from waitstate.schemas.operations import CompleteOperation, Completion, CompletionOutcome

RUN = "run-1"


def _client(outcome: type[Any], *script: Any) -> tuple[WaitstateClient, FakeHandle[Any]]:
    fake = FakeClient(FakeHandle(outcome, list(script)))
    return WaitstateClient(cast(Client, fake)), fake.handle


def _first(sent: list[Any]) -> Any:
    def answer(arg: Any) -> DecideOutcome:
        sent.append(arg)
        return DecideOutcome(accepted=True, status="approved", delivery_id=sent[0].delivery_id)

    return answer


async def test_a_retry_under_the_same_key_gets_the_first_outcome() -> None:
    # The CLI's and the MCP server's decisions carry no delivery id: a retry is not a copy.
    sent: list[DecideInput] = []
    client, handle = _client(DecideOutcome, _first(sent), _first(sent))
    decision = DecideInput(request_id="apr_1", decision="approve")

    first = await client.decide(RUN, decision, update_id="key-1")
    again = await client.decide(RUN, decision, update_id="key-1")

    assert first == again and first.accepted
    assert [update_id for _, _, update_id in handle.updates] == ["key-1", "key-1"]


async def test_a_copy_of_a_delivery_with_an_id_is_refused() -> None:
    sent: list[DecideInput] = []
    client, _ = _client(DecideOutcome, _first(sent), _first(sent))

    await client.decide(RUN, DecideInput(request_id="apr_1", decision="approve", delivery_id="d1"))
    with pytest.raises(AlreadyApplied) as copy:
        await client.decide(
            RUN, DecideInput(request_id="apr_1", decision="approve", delivery_id="d2")
        )

    assert (copy.value.run_id, copy.value.what) == (RUN, "decision")


def _report(delivery_id: str) -> CompleteOperation:
    return CompleteOperation(
        operation_id="op_1",
        nonce="n",
        delivery_id=delivery_id,
        completion=Completion(status="succeeded", result={"rows": 1}),
    )


async def test_a_report_applied_by_another_delivery_is_a_copy_one_not_applied_is_told() -> None:
    applied = CompletionOutcome(applied=True, status="succeeded", delivery_id="d1")
    not_applied = CompletionOutcome(
        applied=False, status="expired", delivery_id="d1", reason="expired first"
    )
    client, _ = _client(CompletionOutcome, applied, applied, not_applied)

    assert await client.complete_operation(RUN, _report("d1"), update_id="u") == applied
    with pytest.raises(AlreadyApplied):
        await client.complete_operation(RUN, _report("d2"), update_id="u")
    # Never applied, for this delivery as for the first: the outcome is the answer.
    assert await client.complete_operation(RUN, _report("d2"), update_id="u") == not_applied


async def test_an_unknown_outcome_names_the_key_to_send_again() -> None:
    client, _ = _client(
        CompletionOutcome,
        WorkflowUpdateRPCTimeoutOrCancelledError(),
        WorkflowUpdateRPCTimeoutOrCancelledError(),
    )

    with pytest.raises(OutcomeUnknown) as told:
        await client.complete_operation(RUN, _report("d1"), update_id="u", key="whk_1")
    assert told.value.key == "whk_1"
    with pytest.raises(OutcomeUnknown) as told:
        await client.complete_operation(
            RUN, _report("d1"), update_id="u", answer_within=timedelta(seconds=1)
        )
    assert told.value.key == "u"
