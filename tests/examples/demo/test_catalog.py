"""The catalog's static names match the tools it builds."""

from __future__ import annotations

import httpx

from examples.demo.catalog import TOOL_NAMES, all_tools
from waitstate.settings import Settings


async def test_tool_names_match_the_tools_built() -> None:
    async with httpx.AsyncClient() as http:
        built = [spec.name for spec in all_tools(http, Settings().demo_systems_url)]

    assert tuple(built) == TOOL_NAMES
