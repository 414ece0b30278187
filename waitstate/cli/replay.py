"""The replay gate, `replay-check`: the histories of the cluster's open and recently closed runs,
replayed on the workflow code at hand before it is deployed. A run the code cannot replay is a
run the deploy would break (docs/versions.md): the command names each one and exits 1.

The workflow classes are given by the caller (the CLI passes the worker's, imported when the
command runs: see `waitstate/names.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, WorkflowHistory
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from waitstate.activation_order import workflow_runner
from waitstate.cli.output import CliError, one_line
from waitstate.cli.versions import literal
from waitstate.client import WaitstateClient
from waitstate.converter import DATA_CONVERTER
from waitstate.names import AGENT_RUN, EVAL_RUN
from waitstate.settings import Settings
from waitstate.tracing import Tracing

DEFAULT_LIMIT = 1000
DEFAULT_CLOSED_WITHIN = timedelta(days=7)
# Fetching one run's history, all its pages: a fetch that hangs fails that run, not the gate.
FETCH_TIMEOUT = timedelta(seconds=30)
# A nondeterminism message can list a whole workflow task's commands: shown on one line, cut.
MESSAGE_LIMIT = 300
# Core wraps the failure's own message (`[TMPRL1100] Nondeterminism error: ...`) in the debug
# form of its structs: the first `message: "..."` in it is the one to show.
# The search attributes Temporal sets on a run a versioned worker has taken.
VERSIONING_BEHAVIOR = "TemporalWorkflowVersioningBehavior"
DEPLOYMENT_VERSION = "TemporalWorkerDeploymentVersion"
PINNED = '"Pinned"'
_CORE_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')

WorkflowClasses = Sequence[type]


@dataclass(frozen=True)
class Listed:
    """One run a query listed."""

    workflow_id: str
    run_id: str


@dataclass(frozen=True)
class Outcome:
    """What became of one listed run: replayed (`problem` None when it replays), or not
    fetched (`fetched` False, `problem` says why)."""

    workflow_id: str
    run_id: str
    problem: str | None
    fetched: bool = True


def default_query(
    closed_within: timedelta, version: str | None, now: datetime | None = None
) -> str:
    """The agent runs and evaluations (which wait for their forks) still open, and those closed
    within `closed_within` of `now`; with
    `version` (`deployment:build_id`, as visibility names it), only the runs that version can
    meet: runs pinned to no version (runs of unversioned workers, runs no worker has taken yet,
    runs that move to the current version) and runs pinned to it. A run pinned to another
    version stays on that version's workers, however long it waits."""
    since = ((now or datetime.now(UTC)) - closed_within).strftime("%Y-%m-%dT%H:%M:%SZ")
    window = (
        f'WorkflowType IN ("{AGENT_RUN}", "{EVAL_RUN}") AND '
        f'(ExecutionStatus = "Running" OR CloseTime > "{since}")'
    )
    if version is None:
        return window
    # Asked for by name, a run without the attribute: visibility stores need not agree on what
    # `!=` makes of one.
    return (
        f"{window} AND ({VERSIONING_BEHAVIOR} IS NULL OR {VERSIONING_BEHAVIOR} != {PINNED}"
        f" OR {DEPLOYMENT_VERSION} = {literal(version)})"
    )


def replayer(workflows: WorkflowClasses) -> Replayer:
    """A replayer of `workflows` as the worker runs them: the same data converter, and the same
    runner (waitstate/activation_order.py)."""
    return Replayer(
        workflows=workflows,
        data_converter=DATA_CONVERTER,
        workflow_runner=workflow_runner(),
        # Without its own logging: core would write a warning of each failure to the console,
        # which the command reports, once and on one line, itself.
        runtime=Runtime(telemetry=TelemetryConfig(logging=None)),
    )


class Listing:
    """The runs a query lists, every one of them counted (`listed`), and the `limit` of them
    that started first replayed, oldest first, each one's history fetched in turn (one history in
    memory at a time). The oldest are the ones to check when not all can be: the runs that have
    waited longest are the likeliest to have been started by code older than the worker's.
    Runs whose history could not be fetched are kept in `unfetched`.
    """

    def __init__(
        self, client: Client, query: str, limit: int, fetch_timeout: timedelta = FETCH_TIMEOUT
    ) -> None:
        self._client = client
        self._query = query
        self._limit = limit
        self._fetch_timeout = fetch_timeout
        self.unfetched: list[Outcome] = []
        self.listed = 0

    @property
    def cut(self) -> int:
        """How many listed runs the limit left unchecked."""
        return max(0, self.listed - self._limit)

    async def histories(self) -> AsyncIterator[WorkflowHistory]:
        """The histories of the oldest `limit` listed runs, oldest first, fetched one by one as
        they are asked for.

        Raises:
            CliError: the query is refused, or the listing fails (exit 2).
        """
        for run in await self._oldest():
            history = await self._fetch(run.workflow_id, run.run_id)
            if history is not None:
                yield history

    async def _oldest(self) -> list[Listed]:
        """The `limit` runs of the query that started first, oldest first, from a listing of
        them all (which visibility gives in no order of ours: SQL stores take no ORDER BY). At
        most `limit` are held: the newest is let go as an older one comes."""
        newest_first: list[tuple[float, str, str]] = []  # a heap of the oldest, newest on top
        try:
            async for execution in self._client.list_workflows(self._query):
                self.listed += 1
                run = (-execution.start_time.timestamp(), execution.id, execution.run_id)
                if len(newest_first) < self._limit:
                    heapq.heappush(newest_first, run)
                elif run > newest_first[0]:
                    heapq.heapreplace(newest_first, run)
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT:
                raise CliError(f"the query is refused: {_first_line(err)}", code=2) from err
            raise CliError(f"could not list runs: {_first_line(err)}", code=2) from err
        return [
            Listed(workflow_id, run_id) for _, workflow_id, run_id in sorted(newest_first)[::-1]
        ]

    async def _fetch(self, workflow_id: str, run_id: str) -> WorkflowHistory | None:
        handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            async with asyncio.timeout(self._fetch_timeout.total_seconds()):
                return await handle.fetch_history(rpc_timeout=self._fetch_timeout)
        except TimeoutError:
            problem = f"its history did not come within {self._fetch_timeout}"
        except RPCError as err:
            problem = f"its history could not be fetched: {_first_line(err)}"
        self.unfetched.append(Outcome(workflow_id, run_id, problem, fetched=False))
        return None


async def replay_runs(listing: Listing, workflows: WorkflowClasses) -> AsyncIterator[Outcome]:
    """What becomes of each run of `listing`, as its history is replayed on `workflows` (or
    found unfetchable), in the listing's order.

    Raises:
        CliError: the query is refused, or the listing fails (exit 2).
    """
    async with replayer(workflows).workflow_replay_iterator(listing.histories()) as results:
        async for result in results:
            for skipped in _taken(listing.unfetched):
                yield skipped
            failure = result.replay_failure
            problem = None if failure is None else _replay_problem(failure)
            yield Outcome(result.history.workflow_id, result.history.run_id, problem)
    for skipped in _taken(listing.unfetched):
        yield skipped


async def cmd_replay_check(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Replay the listed runs' histories on the worker's workflows: 0 when every one replays,
    1 when any does not, 2 when any was not checked (its history could not be fetched, or the
    query lists more runs than --limit) and none failed."""
    try:
        workflows = args.workflows()
    except ImportError as err:
        raise CliError(
            f"replay-check replays the worker's workflow code, which does not import here: {err}",
            code=2,
        ) from err
    if args.query is not None and args.all_versions:
        raise CliError("argument --all-versions: not allowed with argument --query", code=2)
    query, version = args.query, None
    if query is None:
        version = None if args.all_versions else _version(args, settings)
        query = default_query(args.closed_within, version)
    client = await WaitstateClient.connect(settings, tracing=tracing)
    if version is not None:
        print(
            f"checking the runs {one_line(version)} can meet: unpinned, or pinned to it "
            "(--all-versions: every run)"
        )
    listing = Listing(client.temporal, query, args.limit)
    replayed = failed = unfetched = 0
    async for outcome in replay_runs(listing, workflows):
        if not outcome.fetched:
            unfetched += 1
            print(f"not checked: {_run(outcome)}: {outcome.problem}")
        else:
            replayed += 1
            if outcome.problem is not None:
                failed += 1
                print(f"does not replay: {_run(outcome)}: {outcome.problem}")
    print(_summary(replayed, failed, unfetched))
    if listing.cut:
        print(
            f"not checked: {listing.cut} of the {listing.listed} runs the query lists "
            f"(--limit {args.limit}: the oldest were checked)"
        )
    if failed:
        return 1
    return 2 if unfetched or listing.cut else 0


def _version(args: argparse.Namespace, settings: Settings) -> str:
    """The version the deploy brings, as a worker of this checkout would poll as it.

    Raises:
        CliError: it cannot be told (exit 2).
    """
    try:
        return str(args.version(settings))
    except (ImportError, RuntimeError) as err:
        raise CliError(
            f"replay-check cannot tell which version this checkout deploys ({err}); set "
            "WAITSTATE_BUILD_ID, or check every version's runs with --all-versions",
            code=2,
        ) from err


def positive(text: str) -> int:
    """An argparse type: a whole number above 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _taken(outcomes: list[Outcome]) -> list[Outcome]:
    """The outcomes held so far, leaving the list empty."""
    taken = outcomes[:]
    outcomes.clear()
    return taken


def _run(outcome: Outcome) -> str:
    return f"{one_line(outcome.workflow_id)} (run {outcome.run_id})"


def _first_line(err: BaseException) -> str:
    """An error's first line (Temporal's messages may span several)."""
    text = err.message if isinstance(err, RPCError) else str(err)
    return (text.strip() or type(err).__name__).splitlines()[0]


def _replay_problem(failure: BaseException) -> str:
    """Why a history does not replay, on one line of at most `MESSAGE_LIMIT` characters."""
    found = _CORE_MESSAGE.search(str(failure))
    message = found[1] if found else _first_line(failure)
    return message if len(message) <= MESSAGE_LIMIT else f"{message[: MESSAGE_LIMIT - 3]}..."


def _summary(replayed: int, failed: int, unfetched: int) -> str:
    runs = "run" if replayed == 1 else "runs"
    parts = [f"{replayed - failed} ok"]
    if failed:
        parts.append(f"{failed} {'does' if failed == 1 else 'do'} not replay")
    if unfetched:
        parts.append(f"{unfetched} not checked (no history)")
    return f"replayed {replayed} {runs}: {', '.join(parts)}"
