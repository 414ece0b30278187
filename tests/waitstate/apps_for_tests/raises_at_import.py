"""Wrong: importing it raises."""

from __future__ import annotations

from waitstate import App

raise RuntimeError("the CRM_URL variable is not set")

app = App()
