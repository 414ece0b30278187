"""Wrong: an agent's output type is a class, but not a pydantic model."""

from __future__ import annotations

from dataclasses import dataclass

from waitstate import Agent, App


@dataclass
class Report:
    title: str


app = App(agents=[Agent("reporter", output_type=Report)])  # type: ignore[arg-type]
