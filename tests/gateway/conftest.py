"""The gateway's tests share one gateway a module (served in this process, with a recording
deliverer), cleared of what the previous test delivered; a module whose tokens name another
subject gives its own `served`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.rigs import Gateway, running_gateway


@pytest.fixture(scope="module")
async def served() -> AsyncIterator[Gateway]:
    async with running_gateway() as gateway:
        yield gateway


@pytest.fixture
def gw(served: Gateway) -> Iterator[Gateway]:
    served.deliverer.clear()
    yield served
