"""A valid app with deps (an object with an async `aclose`), a script and a provider of its own,
and a tool listed both by the app and by its agent."""

from __future__ import annotations

from collections.abc import Sequence

from waitstate import Agent, App, Message, Provider, RunContext, ToolDefinition, tool


class Greeter:
    """The app's deps: counts the greetings it made and whether it was closed."""

    def __init__(self) -> None:
        self.greeted: list[str] = []
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


# Every Greeter the app's deps factory made, in order.
MADE: list[Greeter] = []


def make_greeter() -> Greeter:
    greeter = Greeter()
    MADE.append(greeter)
    return greeter


@tool
async def greet(ctx: RunContext[Greeter], person: str) -> str:
    """Greet a person."""
    ctx.deps.greeted.append(person)
    return f"Hello, {person}!"


@tool
async def farewell(ctx: RunContext[Greeter], person: str) -> str:
    """Say goodbye to a person."""
    return f"Goodbye, {person} (after {len(ctx.deps.greeted)} greetings)."


def hello(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> Message:
    """A script that answers at once."""
    return Message(role="assistant", content="hello")


def local_provider() -> Provider:
    raise AssertionError("loading an app must not create its providers")


app = App(
    agents=[Agent("greeter", model="scripted:hello", tools=[greet, "request_approval"])],
    tools=[greet, farewell],
    deps=make_greeter,
    providers={"local": local_provider},
    scripts={"hello": hello},
)
