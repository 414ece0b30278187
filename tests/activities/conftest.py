"""Fixtures of the activity tests: the demo systems as the external system, over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.rigs import Systems, demo_systems


@pytest.fixture
async def systems() -> AsyncIterator[Systems]:
    """The demo systems of the test's own: exports and enrichments take a fifth of a second."""
    async with demo_systems() as systems:
        yield systems
