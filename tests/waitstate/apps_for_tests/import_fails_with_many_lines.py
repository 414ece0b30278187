"""Wrong: importing it raises an error whose message spans several lines (a pydantic
ValidationError, as a settings model validated at import raises)."""

from __future__ import annotations

from pydantic import BaseModel

from waitstate import App


class CrmSettings(BaseModel):
    url: str
    timeout_seconds: float


SETTINGS = CrmSettings.model_validate({})

app = App()
