"""Agent trees: an agent that starts agents. Each sub-agent is a run of its own (a child
workflow, with its own history, tools, waits and approvals); its parent waits for it holding no
worker, and gets its answer as the result of the tool call that started it.

A run's sub-agents are tools to its model, `agent_<name>`, taking the sub-agent's task. What
links a node to its tree travels in its input (`TreeLink`); what a parent knows of its children
is in its state (`TreeState`). Workflows import these, so they stay pydantic-only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from waitstate.schemas.messages import Usage

# The tool by which a run starts a sub-agent: `agent_<name>` (a name of letters, digits, `_`
# and `-`, as every provider takes tool names).
SUB_AGENT_PREFIX = "agent_"
# Children one run may have running at once, unless its agent says: Temporal's limit on a
# run's pending children is 2,000, and a tree's history keeps far under it.
DEFAULT_MAX_CHILDREN = 10
MAX_CHILDREN_LIMIT = 1_000
# Levels below the root a tree may grow to, unless the root's agent says.
DEFAULT_MAX_DEPTH = 3
MAX_DEPTH_LIMIT = 10
# A sub-agent's task, at most: what the parent's model writes into its call.
MAX_TASK_CHARS = 20_000
# A child's answer over this many bytes reaches its parent as a preview and a reference
# (`ref://blobs/...`, read with read_ref): the parent's history grows little per child.
ANSWER_INLINE_BYTES = 512
ANSWER_PREVIEW_CHARS = 160
# The activity that keeps a child's long answer in the blob store.
STORE_ANSWER = "store_answer"
# The activity by which a node under its root's budget reserves its next model call, and the
# root's Update it sends (`BudgetAsk` -> `BudgetAnswer`).
RESERVE_TREE_BUDGET = "reserve_tree_budget"

NodeStatus = Literal["running", "ended"]


def sub_agent_tool(agent: str) -> str:
    """The tool name by which a run starts agent `agent`."""
    return f"{SUB_AGENT_PREFIX}{agent}"


def tool_name_ok(agent: str) -> bool:
    """Whether `agent` can be named in a tool (letters, digits, `_`, `-`; 64 in all)."""
    name = sub_agent_tool(agent)
    return len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


class SubAgentTask(BaseModel):
    """The arguments of a sub-agent's tool: what the parent's model asks it to do."""

    task: str = Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="The sub-agent's task, complete in itself: it sees nothing else of yours.",
    )


class TreeLink(BaseModel):
    """Where a sub-agent's run is in its tree (set by its parent; None for a root)."""

    root: str = Field(description="The root run's workflow id.")
    parent: str | None = Field(
        default=None, description="The parent run's workflow id (None: the root's)."
    )
    path: list[str] = Field(description="The node names from below the root to this one.")
    max_depth: int = Field(ge=1, le=MAX_DEPTH_LIMIT, description="The root's limit.")
    budget: bool = Field(
        default=False,
        description="The root has a budget: every model call of the tree reserves from it.",
    )

    @property
    def parent_id(self) -> str:
        return self.parent or self.root

    @property
    def depth(self) -> int:
        return len(self.path)

    def line(self) -> str:
        """The node's path as people read it: `lead/researcher-2/fetcher-1`."""
        return "/".join(self.path)


class ChildRecord(BaseModel):
    """One child of a run, as its parent knows it."""

    run_id: str
    agent: str
    node: str = Field(description="Its name in the tree's paths: `<agent>-<n>`.")
    task: str = Field(description="The start of its task.")
    status: str = Field(default="running", description="`running`, or how its run ended.")
    usage: Usage = Field(
        default_factory=Usage, description="What its subtree spent, once it ended."
    )


class TreeState(BaseModel):
    """A parent's children: those it started, by workflow id, oldest first."""

    children: dict[str, ChildRecord] = Field(default_factory=dict)

    @property
    def started(self) -> int:
        """How many it started (each is kept, whatever became of it)."""
        return len(self.children)

    def running(self) -> int:
        return sum(1 for child in self.children.values() if child.status == "running")

    def usage(self) -> Usage:
        """What its children's subtrees spent, those that ended."""
        total = Usage()
        for child in self.children.values():
            total = total + child.usage
        return total


class TreeBudget(BaseModel):
    """A tree's budget as a node keeps it: a budgeted root, what each node below it reported it
    spent; a node below one, what it reported so far."""

    spent: dict[str, Usage] = Field(
        default_factory=dict, description="A root's: what each node spent, by its path."
    )
    reported: Usage = Field(
        default_factory=Usage, description="A node's: what it told its root it spent."
    )
    asks: int = Field(default=0, description="A node's: its reservations so far.")
    degraded_to: str | None = Field(
        default=None, description="A node's: the model its root's budget degraded it to."
    )

    def descendants(self) -> Usage:
        """What the nodes below a budgeted root told it they spent."""
        total = Usage()
        for usage in self.spent.values():
            total = total + usage
        return total


class StoreAnswer(BaseModel):
    """What a child asks the `store_answer` activity: keep its long answer for its parent."""

    text: str
    owner: str = Field(description="The parent's workflow id, which reads it.")


class BudgetAsk(BaseModel):
    """A node's reservation of its next model call from its root's budget, with what it spent
    since its last one (`final`: it ends, and reserves nothing)."""

    node: str = Field(description="Its path below the root.")
    model: str = Field(description="The model its spending was at, and its next call asks.")
    spent: Usage = Field(default_factory=Usage)
    final: bool = False


class BudgetAnswer(BaseModel):
    """The root's answer: whether the call may start, and with which model."""

    granted: bool
    model: str | None = Field(default=None, description="The model to go on with, if degraded.")
    spent: str = Field(default="", description="What the tree spent, in words.")


class TreeReserve(BaseModel):
    """What the `reserve_tree_budget` activity is asked: send `ask` to the root, as the Update
    `update_id` (a retried activity sends the same one: Temporal applies it once)."""

    root: str
    update_id: str
    ask: BudgetAsk
