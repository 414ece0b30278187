"""The suite's sizes (`python -m chaos --size`): how many runs of each class every part of the
suite starts, and how hard the faults come. One `Size` is handed to every part; each reads the
fields of its own classes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

# How long a run may take to end once the driver is done with it, before it counts as stuck.
RESULT_TIMEOUT = 150.0


@dataclass(frozen=True)
class Size:
    """How much of everything a suite size runs."""

    mixed: int
    model_rounds: int
    parked: int
    cancels: int
    kill_every: tuple[float, float]
    gateway_runs: int
    fuzz_examples: int
    parked_seconds: float = 12.0
    query_every: float = 0.3
    result_timeout: float = RESULT_TIMEOUT
    links: float = 1 / 3
    refunds: bool = True
    # Runs whose tool is an MCP task of the demo's MCP server (the stack starts it), and runs
    # whose MCP task asks a question mid-flight (with `mcp` only).
    mcp: bool = False
    questions: int = 0
    mcp_restarts: int = 0
    # Run the gateway faults after the other phases rather than beside phase A: slower, but
    # their own timeouts then do not meet a saturated machine.
    gateway_alone: bool = False
    # Issue 11 (chaos.exactly_once): runs whose reports beat the start's answer, expiring runs
    # per mode, runs continuing as new while waiting / right after an expiry, decisions
    # racing the policy, rounds of the key rotation's runs, and the timeout of its escalating
    # requests (past the rotation).
    early: int = 3
    expiry: int = 1
    can: int = 4
    can_expiry: int = 1
    races: int = 6
    rotations: int = 1
    # Long enough for the escalation notice of a killed worker (its activity timeout, 12 s) and
    # a driver slowed by a loaded machine (make test beside make chaos) to decide in time.
    rotation_window: timedelta = timedelta(seconds=30)
    # Issue 22 (chaos.outsiders): runs per crafted schema and asker (a purge, and an MCP task
    # when `crafted_mcp`: the stack then starts the MCP server even without `mcp`); runs whose
    # question comes during `wait_for_operations` or during a checkpoint; runs whose webhooks a
    # gateway outage loses; runs of each kind through the blob store outage, and its length
    # (longer than the model's retry budget, about two minutes).
    crafted: int = 0
    crafted_mcp: bool = False
    wait_questions: int = 0
    checkpoint_questions: int = 0
    lost_webhooks: int = 0
    store_runs: int = 0
    store_outage: float = 0.0
    # Issue 39 (chaos.thread_doors): threads whose starts and messages are posted twice, with
    # their answers lost, and while their worker is stopped.
    thread_doors: int = 0
    # Issue 39 (chaos.model_kills): plain runs, and as many threads, whose model calls are held
    # at the model while the workers holding them are SIGKILLed.
    model_kills: int = 0

    # Issue 39 (chaos.mcp_doors): keys per way of sending a call again (twice, after a lost
    # answer, at once), for task runs and for thread messages alike, on waitstate's own MCP
    # server.
    mcp_doors: int = 0
    # Agent trees (chaos.trees): leads killed under mid-tree, and how many sub-agents each
    # starts; leads parked through the server's restarts; three-level trees cancelled.
    trees: int = 0
    tree_fan: int = 4
    tree_parked: int = 0
    tree_cancels: int = 0
    tree_budgets: int = 0  # leads under a tree budget, their workers killed while they spend

    @property
    def mcp_server(self) -> bool:
        """Whether the stack starts the demo's MCP server."""
        return self.mcp or self.crafted_mcp


SIZES = {
    "ci": Size(mixed=16, model_rounds=1, parked=3, cancels=1, kill_every=(2, 4),
               gateway_runs=3, fuzz_examples=40,
               crafted=1, crafted_mcp=True, wait_questions=2, checkpoint_questions=2,
               lost_webhooks=3, store_runs=2, store_outage=150.0, thread_doors=3, model_kills=1,
               mcp_doors=1, trees=2, tree_fan=4, tree_parked=1, tree_cancels=1,
               tree_budgets=1),
    "full": Size(mixed=81, model_rounds=4, parked=8, cancels=2, kill_every=(3, 8),
                 gateway_runs=10, fuzz_examples=300, parked_seconds=15.0, gateway_alone=True,
                 mcp=True, questions=6, mcp_restarts=2,
                 early=6, expiry=2, can=8, can_expiry=2, races=9, rotations=2,
                 rotation_window=timedelta(seconds=30),
                 crafted=2, crafted_mcp=True, wait_questions=4, checkpoint_questions=4,
                 lost_webhooks=6, store_runs=3, store_outage=180.0, thread_doors=8, model_kills=2,
                 mcp_doors=2, trees=4, tree_fan=8, tree_parked=2, tree_cancels=4,
                 tree_budgets=3),
    # 1,000 runs in all: 862 of the mix and 138 of issue 11's classes.
    "load": Size(mixed=862, model_rounds=0, parked=0, cancels=0, kill_every=(10, 20),
                 gateway_runs=0, fuzz_examples=0, query_every=1.0, result_timeout=1200,
                 links=0.05, refunds=False, early=30, expiry=10, can=32, can_expiry=10,
                 races=12, rotations=2, rotation_window=timedelta(seconds=120)),
}  # fmt: skip
