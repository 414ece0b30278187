"""The agent activity: a run of a named agent records the agent's definition once, at its start."""

from __future__ import annotations

import json
from collections.abc import Mapping

from temporalio import activity
from temporalio.exceptions import ApplicationError

from waitstate.agents import Agent
from waitstate.blobs.results import shrink
from waitstate.blobs.store import BlobStore
from waitstate.schemas.errors import RUN_INPUT_INVALID
from waitstate.schemas.run import RESOLVE_AGENT, AgentConfig
from waitstate.schemas.tree import (
    ANSWER_INLINE_BYTES,
    ANSWER_PREVIEW_CHARS,
    STORE_ANSWER,
    StoreAnswer,
)

OUTPUT_PROMPT = (
    "When you give your final answer, answer with only a JSON object matching this JSON "
    "schema, and nothing else: {schema}"
)


class AgentActivities:
    """The agents this worker's apps declare, by name, and the model of those without one."""

    def __init__(
        self, agents: Mapping[str, Agent], default_model: str, blobs: BlobStore | None = None
    ) -> None:
        self._agents = dict(agents)
        self._default_model = default_model
        self._blobs = blobs

    @activity.defn(name=STORE_ANSWER)
    async def store_answer(self, input: StoreAnswer) -> str:
        """A sub-agent's long answer, kept for its parent: a preview and its reference.

        Raises:
            ApplicationError: non-retryable, when this worker has no blob store.
        """
        if self._blobs is None:
            raise ApplicationError("this worker has no blob store", non_retryable=True)
        return await shrink(
            self._blobs,
            input.text,
            threshold=ANSWER_INLINE_BYTES,
            preview_chars=ANSWER_PREVIEW_CHARS,
            owner=input.owner,
        )

    @activity.defn(name=RESOLVE_AGENT)
    async def resolve_agent(self, name: str) -> AgentConfig:
        """The definition of agent `name`, as the run will keep it.

        Raises:
            ApplicationError: non-retryable, naming the known agents, when there is no such
                agent on this worker.
        """
        agent = self._agents.get(name)
        if agent is None:
            known = ", ".join(sorted(self._agents)) or "none (the worker loaded no app)"
            raise ApplicationError(
                f"unknown agent {name!r}; known: {known}",
                type=RUN_INPUT_INVALID,
                non_retryable=True,
            )
        return config_of(agent, self._default_model)


def config_of(agent: Agent, default_model: str) -> AgentConfig:
    """What a run of `agent` records of it; an output type is also stated in the prompt."""
    prompt = agent.instructions
    if agent.output_type is not None:
        schema = json.dumps(agent.output_type.model_json_schema(), separators=(",", ":"))
        prompt = f"{prompt}\n\n{OUTPUT_PROMPT.format(schema=schema)}"
    return AgentConfig(
        name=agent.name,
        system_prompt=prompt,
        model=agent.model or default_model,
        tools=agent.tool_names() + agent.sub_agent_tools(),
        approval=agent.approval,
        max_turns=agent.max_turns,
        operation_timeout=agent.operation_timeout,
        constraints=list(agent.constraints),
        thread=agent.thread,
        budget=agent.budget,
        tenant=agent.tenant,
        sub_agents=list(agent.sub_agents),
        max_children=agent.max_children if agent.sub_agents else None,
        max_depth=agent.max_depth if agent.sub_agents else None,
        output_schema=(
            agent.output_type.model_json_schema() if agent.output_type is not None else None
        ),
    )
