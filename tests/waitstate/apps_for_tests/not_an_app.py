"""Wrong: `app` is a dict, not an `App`."""

from __future__ import annotations

from typing import Any

app: dict[str, Any] = {"agents": []}
