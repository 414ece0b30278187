"""What a run does once, before its first turn: take its agent's definition, read a fork's
recording (if it was not given one), and list the MCP tools it was granted. Any failing ends the
run at once, saying why."""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from waitstate.schemas import RunState
from waitstate.schemas.builtin import MCP_SEPARATOR as SEPARATOR
from waitstate.schemas.errors import RUN_FAILED
from waitstate.schemas.forks import READ_RECORDING, ForkOf, Recording, RecordingRequest
from waitstate.schemas.run import (
    LIST_MCP_TOOLS,
    RESOLVE_AGENT,
    AgentConfig,
    McpListing,
    McpListInput,
)

from . import ledger
from .activity_calls import Failed, call
from .board import StatusBoard
from .memory import Memory
from .outages import StoreDown, StoreOutages
from .plan import Plan
from .policies import (
    AGENT_CALL,
    HISTORY_CALL,
    MCP_LISTING_RETRY,
    MCP_LISTING_TIMEOUT,
    TOOL_HEARTBEAT,
)


class Opening:
    """The run's opening: its agent, its MCP tools (not again in a run continued as new)."""

    def __init__(
        self, plan: Plan, state: RunState, board: StatusBoard, outages: StoreOutages, memory: Memory
    ) -> None:
        self._plan = plan
        self._state = state
        self._board = board
        self._outages = outages
        self._memory = memory

    async def open(self) -> None:
        input = self._plan.input
        if input.agent is not None and input.carry is None:
            await self._take_agent(input.agent)
        if input.fork is not None and input.fork.recording is None and input.carry is None:
            await self._read_recording(input.fork)
        if self._plan.input.mcp_listing is None and any(
            SEPARATOR in n for n in self._plan.input.tools
        ):
            await self._list_mcp_tools()

    async def _take_agent(self, name: str) -> None:
        """Record the agent's definition (as the worker has it now) and let it set every field
        the run's input left unset; an agent the worker does not have fails the run at once.
        A sub-agent's run takes it by a local activity: one event, no task of its own, for
        each of a tree's many nodes (runs before trees took it by an activity, and still do)."""
        config = await call(
            RESOLVE_AGENT,
            name,
            result_type=AgentConfig,
            summary=f"agent {name}",
            local=self._plan.input.tree is not None,
            **AGENT_CALL,
        )
        if isinstance(config, Failed):
            self._fail(config)
        overrides = self._plan.input.agent_overrides or ()
        resolved = {f: v for f, v in config.defaults().items() if f not in overrides}
        # A thread of the agent takes messages as the agent says, unless its starter said.
        thread = self._state.thread
        if config.thread is not None and thread is not None and "thread" not in overrides:
            resolved["thread"] = thread.settings = config.thread
        self._plan.resolve(**resolved)
        self._state.agent = name
        self._state.model = self._plan.input.model
        self._state.constraints = list(self._plan.input.constraints)

    async def _read_recording(self, fork: ForkOf) -> None:
        """A fork started without its recording reads it (the recorded run's histories, by the
        client) and goes on from its prefix; a run that cannot be forked there fails at once."""
        recording = await call(
            READ_RECORDING,
            RecordingRequest(origin=fork.origin, at=fork.at),
            result_type=Recording,
            summary=f"recording of {fork.origin}",
            **HISTORY_CALL,
        )
        if isinstance(recording, Failed):
            self._fail(recording)
        self._plan.resolve(fork=fork.model_copy(update={"recording": recording}))
        self._memory.forked(recording)

    async def _list_mcp_tools(self) -> None:
        """List the MCP tools the run was granted, once: every turn, worker and continued run
        then sees the same definitions (kept by reference)."""
        grants = [name for name in self._plan.input.tools if SEPARATOR in name]
        # The listing is kept in the blob store: an outage of it is waited out.
        tries = self._outages.tries("listing of MCP tools", MCP_LISTING_RETRY)
        request = McpListInput(grants=grants)
        while True:
            listing = await tries.call(
                LIST_MCP_TOOLS,
                request,
                result_type=McpListing,
                summary=f"MCP tools {', '.join(grants)}",
                start_to_close_timeout=MCP_LISTING_TIMEOUT,
                heartbeat_timeout=TOOL_HEARTBEAT,
            )
            if not isinstance(listing, StoreDown):
                break
            await workflow.sleep(listing.delay)
        if isinstance(listing, Failed):
            self._fail(listing)
        self._plan.resolve(mcp_listing=listing)  # carried on by continue-as-new

    def _fail(self, failed: Failed) -> NoReturn:
        """What the run was started with cannot be served (an unknown agent, an MCP grant no
        server answers): it ends failed at once, saying why in one line."""
        ledger.failed(self._state, failed.message)
        self._board.set_status("failed")
        raise ApplicationError(failed.message, type=RUN_FAILED, non_retryable=True) from None
