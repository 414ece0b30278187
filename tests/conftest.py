"""Shared fixtures: real Temporal servers started once per session from the installed binaries."""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType
from temporalio.testing import WorkflowEnvironment

from waitstate.converter import DATA_CONVERTER
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

BIN = Path(sys.executable).parent
TEMPORAL_CLI = BIN / "temporal"
TEST_SERVER = BIN / "temporal-test-server"


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server: a 24-hour timer takes milliseconds."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=DATA_CONVERTER, test_server_existing_path=str(TEST_SERVER)
    )
    async with env:
        await _register_search_attributes(env.client)
        yield env


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """The real dev server (`temporal server start-dev`), in memory, on free ports."""
    env = await WorkflowEnvironment.start_local(
        data_converter=DATA_CONVERTER,
        dev_server_existing_path=str(TEMPORAL_CLI),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=[
            "--dynamic-config-value",
            "history.transferProcessorMaxPollRPS=2000",
        ],
    )
    async with env:
        yield env


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens, held (bound, not listening) for the test, so
    no other socket can take it, as a listener or as an outgoing connection's own port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@pytest.fixture
def task_queue() -> str:
    """A task queue of the test's own, so tests never take each other's tasks."""
    return f"test-{uuid.uuid4()}"


async def _register_search_attributes(client: Client) -> None:
    # The time-skipping server has no flag for them; its operator service accepts them.
    kinds = {
        SearchAttributeIndexedValueType.KEYWORD: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
        SearchAttributeIndexedValueType.INT: IndexedValueType.INDEXED_VALUE_TYPE_INT,
        SearchAttributeIndexedValueType.DATETIME: IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
    }
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={
                key.name: kinds[key.indexed_value_type] for key in SEARCH_ATTRIBUTES
            },
        )
    )
