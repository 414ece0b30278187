"""A fork's tool calls: answered from the recording of the run it forks, never by an external
system unless its policy is `live` and a person approved the call (docs/forks.md).

A call whose tool and arguments the recorded run's model made gets the result that model read
(a tool called more often than recorded gets the last recording again). Any other call is
refused to the model as unavailable under `recorded`, answered by the tool's stub under `stub`,
and under `live` asked of a person, then made for real. A sub-agent's call is run again as a
fork of the recorded child (`ForkOf.child`); `read_ref` and the operations' built-ins read the
run's own state, and run as in any run.
"""

from __future__ import annotations

from waitstate.schemas import ToolCall, ToolCallInput, ToolResult
from waitstate.schemas.builtin import GET_OPERATION_STATUS, READ_REF, WAIT_FOR_OPERATIONS
from waitstate.schemas.forks import ForkOf, ForkState, call_key
from waitstate.schemas.run import CALL_TOOL
from waitstate.schemas.tree import SUB_AGENT_PREFIX, SubAgentTask

from . import ledger
from .activity_calls import Failed, call
from .approvals import ApprovalDesk
from .parts import Part, RunParts
from .policies import TOOL_HEARTBEAT, TOOL_RETRY

# What a fork runs as in any run: its own state's reads.
OWN_TOOLS = frozenset({READ_REF, GET_OPERATION_STATUS, WAIT_FOR_OPERATIONS})


class Fork(Part):
    """How a fork's calls are answered (a run that is no fork has none of this)."""

    def __init__(self, run: RunParts, approvals: ApprovalDesk) -> None:
        super().__init__(run)
        self._approvals = approvals
        fork = self._input.fork
        if fork is not None and self._state.fork is None:
            self._state.fork = ForkState(origin=fork.origin, at=fork.at, policy=fork.policy)

    @property
    def on(self) -> bool:
        """Whether the run is a fork."""
        return self._state.fork is not None

    async def answer(self, call: ToolCall, tools: list[str]) -> ToolResult | None:
        """The result of `call` in a fork whose model has `tools`, or None: the call runs as in
        any run (no fork, a tool the run does not have, one of the run's own reads, a
        sub-agent's fork, or a `live` call a person approved)."""
        fork = self._input.fork
        kept = self._state.fork
        if fork is None or kept is None or call.name not in (*tools, *OWN_TOOLS):
            return None
        assert fork.recording is not None  # read at the opening
        if call.name.startswith(SUB_AGENT_PREFIX):
            return self._sub_agent(fork, call)
        key = call_key(call.name, call.arguments)
        recorded = fork.recording.find(call.name, call.arguments, kept.seen.get(key, 0))
        if recorded is not None:
            kept.seen[key] = kept.seen.get(key, 0) + 1
            return recorded.result(call)
        if call.name in OWN_TOOLS:
            return None
        if fork.policy == "stub":
            return await self._stub(call)
        if fork.policy == "live":
            return await self._live(fork, call)
        return self._unavailable(call, "the recorded run made no such call")

    def _sub_agent(self, fork: ForkOf, call: ToolCall) -> ToolResult | None:
        """A sub-agent's call: run again as a fork of the child the recorded run started on the
        same task (`SubAgents.run`); refused if it started none, unless the policy is live."""
        args = ledger.arguments(call, SubAgentTask)
        if isinstance(args, ToolResult):
            return args
        if fork.child(call.name.removeprefix(SUB_AGENT_PREFIX), args.task) is not None:
            return None
        return self._unavailable(call, "the recorded run started no such sub-agent")

    def _unavailable(self, call: ToolCall, why: str) -> ToolResult:
        assert self._state.fork is not None
        self._state.fork.unavailable.append(ledger.preview(f"{call.name} {call.arguments}"))
        return ledger.error_result(
            call,
            f"unavailable: this run is a fork of {self._state.fork.origin}, whose tools answer "
            f"from its recording, and {why}; go on without it",
        )

    async def _stub(self, tool_call: ToolCall) -> ToolResult:
        """The tool's stub answers (the `call_tool` activity, which runs nothing for real)."""
        assert self._state.fork is not None
        self._state.fork.stubbed += 1
        result = await call(
            CALL_TOOL,
            ToolCallInput(call=tool_call, stub=True),
            result_type=ToolResult,
            summary=f"stub {tool_call.name}",
            start_to_close_timeout=self._input.tool_timeout,
            heartbeat_timeout=TOOL_HEARTBEAT,
            retry_policy=TOOL_RETRY,
        )
        if isinstance(result, Failed):
            return ledger.error_result(
                tool_call, f"{tool_call.name}'s stub failed: {result.reason}"
            )
        return result.model_copy(update={"tool_call_id": tool_call.id, "name": tool_call.name})

    async def _live(self, fork: ForkOf, call: ToolCall) -> ToolResult | None:
        """A call the recording has no result for, made for real once a person approves it."""
        assert self._state.fork is not None
        reason = (
            f"fork of {fork.origin}: call {call.name} {ledger.preview(call.arguments)} for "
            "real (the recorded run made no such call)"
        )
        request = await self._approvals.ask(call, reason, self._input.approval, checkpoint=False)
        if request.status != "approved":
            outcome = {"ran": False, **ledger.approval_outcome(request)}
            return ledger.error_result(call, ledger.to_json(outcome))
        self._state.fork.live += 1
        return None
