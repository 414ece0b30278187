"""Version B of the deploy drill (tests/test_deploy_drill.py): `AgentRunWorkflow` changed without a
patch, so that it cannot replay a run recorded by today's code."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waitstate.names import AGENT_RUN
    from waitstate.schemas import RunInput, RunResult
    from waitstate.workflows.agent_run import AgentRunWorkflow

# B's first command: a timer, before anything a run of version A does first.
SETTLE = timedelta(milliseconds=10)


@workflow.defn(name=AGENT_RUN)
class AgentRunWorkflowB(AgentRunWorkflow):
    """Today's run, after a timer of its own: any history of A's fails to replay on it."""

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        await workflow.sleep(SETTLE)
        return await super().run(input)
