"""What the suite's parts hand each other: the target of the gateway attacks, and the
checks every part reports (one row of the printed table each)."""

from __future__ import annotations

from dataclasses import dataclass, field

from temporalio.client import Client


@dataclass(frozen=True)
class GatewayTarget:
    """Where the gateway faults are aimed, and what they may use.

    `systems_url` is a demo-systems instance of the gateway faults' own, served by a worker
    polling `task_queue`: faults set there (`never_complete`, ...) touch no other run.
    """

    client: Client
    gateway_url: str
    systems_url: str
    task_queue: str
    token_keys: dict[str, str]
    signing_key_id: str


@dataclass
class Check:
    """One fault class, or one invariant, as a row of the table."""

    name: str
    attempts: int = 0
    outcome: str = ""
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No violation was seen."""
        return not self.violations
