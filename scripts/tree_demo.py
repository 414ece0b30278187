"""Run the research lead of the demo app (examples/demo/research.py) to its report, as
`make tree-demo` does after `make up`: print each researcher as it starts and ends, approve the
payments researcher's read after a few seconds (as `make demo` approves its refund), then the
report and the Web UI's links to the lead and to every node of its tree.

    python scripts/tree_demo.py [--approve-after SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from urllib.parse import quote

from waitstate.cli.output import one_line, print_outcome
from waitstate.client import GOING_STATUSES, ClientError, WaitstateClient
from waitstate.names import cli_command
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.approvals import DecideInput
from waitstate.settings import Settings, exit_process

# The demo app is the checkout's (examples/ is not installed), as the worker of `make up` loads it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.demo.research import RESEARCH_TASK  # noqa: E402

LOOK_EVERY = 0.5  # seconds between looks at the tree
REVIEWER = "auto-approve (demo)"


async def main(approve_after: float) -> int:
    """Start the lead, attend to its tree until it ends, print how it ended."""
    settings = Settings.from_env(worker=False)
    client = await WaitstateClient.connect(settings)
    run_id = f"research-{int(time.time())}"
    await client.start(RunInput(task=RESEARCH_TASK, agent="research-lead"), run_id=run_id)
    print(f"run {run_id} (agent research-lead)\ntask: {RESEARCH_TASK}")
    print(f"web ui: {settings.run_url(run_id)}", flush=True)
    nodes: dict[str, str] = {}  # child run id -> its status as last shown
    requests: dict[str, float] = {}  # approval request id -> when it was first seen
    while True:
        state = (await client.status(run_id)).state
        if state.status not in GOING_STATUSES:
            break
        for child_id, status in _children(state).items():
            if nodes.get(child_id) != status:
                nodes[child_id] = status
                print(f"  {child_id.removeprefix(f'{run_id}/')}: {status}", flush=True)
            if status == "running":
                await _attend(client, child_id, requests, approve_after)
        await asyncio.sleep(LOOK_EVERY)
    outcome = await client.outcome(run_id)
    for child_id, status in _children(await client.query(run_id)).items():
        if nodes.get(child_id) != status:
            print(f"  {child_id.removeprefix(f'{run_id}/')}: {status}")
    print_outcome(outcome)
    print(f"web ui: {settings.run_url(run_id)}")
    query = quote(f'RootWorkflowId="{run_id}"')
    print(f"every node: {settings.ui_url}/namespaces/{settings.namespace}/workflows?query={query}")
    return 0 if outcome.status == "completed" else 1


def _children(state: RunState) -> dict[str, str]:
    """The run's children by run id, with their status."""
    if state.tree is None:
        return {}
    return {child.run_id: child.status for child in state.tree.children.values()}


async def _attend(
    client: WaitstateClient, child_id: str, requests: dict[str, float], approve_after: float
) -> None:
    """Show how to answer each new approval request of the child; approve it once it has
    waited `approve_after` seconds."""
    try:
        open_requests = await client.open_requests(child_id)
    except ClientError:  # it ended between two looks: the next look shows how
        return
    now = time.monotonic()
    for request in open_requests:
        first = requests.setdefault(request.request_id, now)
        if first == now:
            print(f"    waiting for approval: {one_line(request.reason)}")
            print(f"      {cli_command()} approve {child_id} --request {request.request_id}")
            print(f"    this demo approves it in {approve_after:g} s", flush=True)
        elif now - first >= approve_after:
            requests[request.request_id] = float("inf")  # approve once
            decision = DecideInput(
                request_id=request.request_id, decision="approve", reviewer=REVIEWER
            )
            try:
                await client.decide(child_id, decision)
            except ClientError as err:  # someone decided first: the run goes on
                print(f"    auto-approve: {err}", file=sys.stderr, flush=True)
            else:
                print(f"    auto-approved request {request.request_id}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--approve-after", type=float, default=5.0, metavar="SECONDS")
    # A process that used a Temporal client ends without interpreter teardown, as the CLI's
    # does (`exit_process` says why).
    exit_process(asyncio.run(main(parser.parse_args().approve_after)))
