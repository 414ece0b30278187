"""The gateway attacks of the reliability suite (fault classes 3, 4 and 6) at a small size,
against a real stack: dev server, in-process gateway and demo systems over HTTP, and the
production worker wiring on a task queue of the test's own."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from chaos.gateway_faults import run_gateway_faults
from chaos.model import GatewayTarget
from examples.demo.catalog import all_tools
from examples.systems import create_app as systems_app
from tests.rigs import serving_stack

# Two keys: tokens are signed with the first, and the second makes the nonce-mismatch attack
# possible (a token that verifies but was not the one the run was given).
KEYS = {"chaos": "c" * 40, "older": "o" * 40}
EXPECTED_ROWS = {
    "3 duplicate completions (20 concurrent)",
    "3 duplicate decisions (20 concurrent)",
    "3 late completions after expiry",
    "3 late decisions after expiry",
    "3 completions/decisions for cancelled runs",
    "4 bad tokens: complete endpoint",
    "4 bad tokens: decision endpoint",
    "6 fuzzed requests (OpenAPI)",
    "gateway: no 5xx for bad input",
}


async def test_gateway_attacks_break_no_invariant(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    systems = systems_app(export_seconds=0.5)
    async with (
        serving_stack(dev_env.client, task_queue, KEYS, "chaos", systems, within=30) as stack,
        stack.worker(tools=all_tools(stack.http, stack.systems_url)),
    ):
        target = GatewayTarget(
            client=dev_env.client,
            gateway_url=stack.gateway_url,
            systems_url=stack.systems_url,
            task_queue=task_queue,
            token_keys=KEYS,
            signing_key_id="chaos",
        )
        checks = await run_gateway_faults(target, runs=2, fuzz_examples=150, seed=7)

    assert {check.name for check in checks} == EXPECTED_ROWS
    violations = {check.name: check.violations for check in checks if check.violations}
    assert not violations, violations
    assert all(check.attempts > 0 for check in checks), [(c.name, c.attempts) for c in checks]
