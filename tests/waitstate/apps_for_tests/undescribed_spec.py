"""Wrong: a tool declared as a ToolSpec with a blank description."""

from __future__ import annotations

from pydantic import BaseModel

from waitstate import App, ToolSpec


class PingArgs(BaseModel):
    host: str


async def ping(args: PingArgs) -> str:
    return args.host


app = App(tools=[ToolSpec(name="ping", description=" ", args=PingArgs, handler=ping)])
