"""`versions`: the open agent runs per patch marker and per worker deployment version, from
visibility, so an operator knows when a patch can be retired and when a version's workers can
stop (docs/versions.md, "The patch lifecycle").

The numbers come from search attributes Temporal keeps for every run:

- `TemporalChangeVersion`, the keyword list of the patch markers the run has recorded, upserted
  by the SDK when `workflow.patched(marker)` first returns true in a run. A run records only
  the newest marker its code checks for, which implies every earlier one; a run started
  before a marker existed never records it. (Since the 1.0 baseline the agent run checks for
  none: the table of markers is then empty.)
- `TemporalWorkerDeploymentVersion` (`deployment:build_id`), set once a worker of a deployment
  version has run one of the run's tasks, and `TemporalWorkflowVersioningBehavior` (`Pinned`
  or `AutoUpgrade`). Runs of unversioned workers, and runs no worker has taken yet, have none.

The markers, oldest first, are given by the caller (the CLI passes those of
`waitstate/workflows/versions.py`, imported when the command runs).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from temporalio.api.deployment.v1 import RoutingConfig, WorkerDeploymentInfo
from temporalio.api.enums.v1 import VersionDrainageStatus, WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    ListWorkerDeploymentsRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from waitstate.cli.output import CliError, one_line, print_json
from waitstate.client import WaitstateClient
from waitstate.names import AGENT_RUN
from waitstate.settings import Settings
from waitstate.tracing import Tracing

# Like replay-check's: runs listed (not counted) to find the deployment versions they are on.
DEFAULT_LIMIT = 1000
OPEN_RUNS = f'WorkflowType = "{AGENT_RUN}" AND ExecutionStatus = "Running"'
CHANGE_VERSION = "TemporalChangeVersion"
DEPLOYMENT_VERSION = SearchAttributeKey.for_keyword("TemporalWorkerDeploymentVersion")
VERSIONING_BEHAVIOR = "TemporalWorkflowVersioningBehavior"


@dataclass(frozen=True)
class MarkerCount:
    """One patch marker's open runs.

    Attributes:
        marker: The patch id.
        recorded: Open runs that recorded this very marker: while there are any, the marker's
            `workflow.patched`/`deprecate_patch` call stays in the code.
        without: Open runs that recorded neither it nor a newer marker (runs started on code
            before it, and runs no worker has taken yet): while there are any, the code the
            marker's flag turns off stays.
    """

    marker: str
    recorded: int
    without: int


@dataclass(frozen=True)
class VersionState:
    """Where a worker deployment version stands, as its deployment describes it.

    Attributes:
        state: `current` (new runs start on it), `ramping` (a share of them do), `draining`
            (runs pinned to it are still open, as Temporal last checked), `drained` (none is),
            `inactive` (never current nor ramping), or `created`.
        ramp_percentage: The share of new runs it takes, while it ramps.
    """

    state: str
    ramp_percentage: float | None = None


@dataclass(frozen=True)
class VersionCount:
    """The open runs on one worker deployment version (`version` None: on none), where the
    version stands (`state` None: no deployment knows it) and whether its workers can stop:
    neither current, ramping nor draining, with no open run pinned to it (None: unknown)."""

    version: str | None
    open_runs: int
    pinned: int
    state: str | None = None
    ramp_percentage: float | None = None
    can_stop: bool | None = None


@dataclass(frozen=True)
class VersionsReport:
    """What `versions` prints: the open runs in all, per marker (oldest first) and per
    deployment version; `unlisted` open runs are on versions the scan of the first `scanned`
    runs did not meet (more runs than --limit)."""

    query: str
    open_runs: int
    markers: list[MarkerCount]
    versions: list[VersionCount]
    scanned: int
    unlisted: int


def open_runs_query(query: str | None) -> str:
    """The open agent runs, narrowed by a visibility filter of the operator's own."""
    return OPEN_RUNS if query is None else f"{OPEN_RUNS} AND ({query})"


def without_query(base: str, markers: Sequence[str]) -> str:
    """The runs of `base` that recorded none of `markers`, those that recorded no marker at all
    included (asked for by name: visibility stores need not agree on what `NOT IN` makes of a
    run without the attribute)."""
    listed = ", ".join(literal(marker) for marker in markers)
    return f"{base} AND ({CHANGE_VERSION} IS NULL OR {CHANGE_VERSION} NOT IN ({listed}))"


def literal(text: str) -> str:
    """`text` as a string of the visibility query language."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def versions_report(
    client: Client, markers: Sequence[str], query: str | None, limit: int
) -> VersionsReport:
    """Count the open agent runs (those of `query` among them) per marker and per version.

    Visibility has no GROUP BY for these attributes (only for ExecutionStatus): each number is
    a count of its own, taken one after another.

    Args:
        markers: The patch ids the code checks for, oldest first.
        limit: At most this many open runs are listed to find their deployment versions.

    Raises:
        CliError: the query is refused, or visibility does not answer (exit 2).
    """
    base = open_runs_query(query)
    total = await _count(client, base)
    counts = [
        MarkerCount(
            marker,
            recorded=await _count(client, f"{base} AND {CHANGE_VERSION} = {literal(marker)}"),
            without=await _count(client, without_query(base, markers[index:])),
        )
        for index, marker in enumerate(markers)
    ]
    seen, scanned = await _versions_seen(client, base, limit)
    states = await _deployment_versions(client)
    versions = []
    for version in sorted(seen | states.keys()):
        pinned = await _count(
            client, f'{base} AND {_on(version)} AND {VERSIONING_BEHAVIOR} = "Pinned"'
        )
        stands = states.get(version)
        versions.append(
            VersionCount(
                version,
                open_runs=await _count(client, f"{base} AND {_on(version)}"),
                pinned=pinned,
                state=None if stands is None else stands.state,
                ramp_percentage=None if stands is None else stands.ramp_percentage,
                can_stop=_can_stop(stands, pinned),
            )
        )
    unversioned = await _count(client, f"{base} AND {DEPLOYMENT_VERSION.name} IS NULL")
    versions.append(VersionCount(None, open_runs=unversioned, pinned=0))
    unlisted = max(0, total - sum(version.open_runs for version in versions))
    return VersionsReport(base, total, counts, versions, scanned, unlisted)


async def cmd_versions(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Print the open runs per patch marker and per deployment version: 0 when counted, 2 on
    a refused query or an unreachable cluster."""
    try:
        markers = list(args.markers())
    except ImportError as err:
        raise CliError(
            f"versions reads the patch markers of the worker's workflow code, which does not "
            f"import here: {err}",
            code=2,
        ) from err
    client = await WaitstateClient.connect(settings, tracing=tracing)
    report = await versions_report(client.temporal, markers, args.query, args.limit)
    if args.json:
        print_json(asdict(report))
        return 0
    for line in render(report, args.limit):
        print(line)
    return 0


def render(report: VersionsReport, limit: int) -> list[str]:
    """The report as the table `versions` prints."""
    lines = [f"open agent runs: {report.open_runs}", ""]
    if report.markers:
        marker_rows = [("patch marker", "recorded it", "without it or a newer one")]
        marker_rows += [(m.marker, str(m.recorded), str(m.without)) for m in report.markers]
        lines += _table(marker_rows, right=2)
    else:
        lines.append("patch markers: none (every run has the 1.0 baseline)")
    lines.append("")
    version_rows = [("deployment version", "open runs", "pinned", "state", "can stop")]
    version_rows += [
        (
            "(none)" if v.version is None else one_line(v.version),
            str(v.open_runs),
            "-" if v.version is None else str(v.pinned),
            _state_cell(v),
            "-" if v.version is None else _CAN_STOP[v.can_stop],
        )
        for v in report.versions
    ]
    lines += _table(version_rows, right=2)
    if report.scanned < report.open_runs:
        lines.append(
            f"listed {report.scanned} of the {report.open_runs} open runs to find the versions "
            f"they are on (--limit {limit}); the counts are of all of them"
        )
    if report.unlisted:
        lines.append(f"{report.unlisted} open runs are on versions not listed above")
    return lines


_CAN_STOP = {True: "yes", False: "no", None: "?"}


def _state_cell(count: VersionCount) -> str:
    if count.state is None:
        return "-"
    if count.ramp_percentage is not None:
        return f"{count.state} {count.ramp_percentage:g}%"
    return count.state


def _table(rows: Sequence[tuple[str, ...]], right: int) -> list[str]:
    """Rows as columns, the first left-aligned, the next `right` right-aligned (numbers), the
    rest left-aligned; no trailing spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(width) if 0 < i <= right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _on(version: str | None) -> str:
    if version is None:
        return f"{DEPLOYMENT_VERSION.name} IS NULL"
    return f"{DEPLOYMENT_VERSION.name} = {literal(version)}"


async def _count(client: Client, query: str) -> int:
    try:
        return (await client.count_workflows(query)).count
    except RPCError as err:
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            raise CliError(f"the query is refused: {_first_line(err)}", code=2) from err
        raise CliError(f"could not count runs: {_first_line(err)}", code=2) from err


async def _versions_seen(client: Client, base: str, limit: int) -> tuple[set[str], int]:
    """The deployment versions of the first `limit` open runs, and how many were listed."""
    seen: set[str] = set()
    scanned = 0
    try:
        async for execution in client.list_workflows(base, limit=limit):
            scanned += 1
            version = execution.typed_search_attributes.get(DEPLOYMENT_VERSION)
            if version:
                seen.add(version)
    except RPCError as err:
        raise CliError(f"could not list runs: {_first_line(err)}", code=2) from err
    return seen, scanned


async def _deployment_versions(client: Client) -> dict[str, VersionState]:
    """The versions the namespace's worker deployments know, and where each stands, so that a
    version no open run is on is shown too (it can stop). A server without Worker Deployments
    knows none."""
    service = client.workflow_service
    found: dict[str, VersionState] = {}
    names: list[str] = []
    page = b""
    try:
        while True:
            listed = await service.list_worker_deployments(
                ListWorkerDeploymentsRequest(namespace=client.namespace, next_page_token=page)
            )
            names += [deployment.name for deployment in listed.worker_deployments]
            if not (page := listed.next_page_token):
                break
        for name in names:
            found |= await _versions_of(client, name)
    except RPCError as err:
        if err.status in (RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.PERMISSION_DENIED):
            return found
        raise CliError(f"could not list worker deployments: {_first_line(err)}", code=2) from err
    return found


async def _versions_of(client: Client, deployment: str) -> dict[str, VersionState]:
    """The versions of one worker deployment and where each stands (none if the deployment was
    deleted since it was listed)."""
    try:
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return {}
        raise
    info = described.worker_deployment_info
    routing = info.routing_config
    found = {}
    for summary in info.version_summaries:
        version = summary.deployment_version
        if not version.build_id:
            continue
        state = _STATES.get(summary.status) or _state_of_older_server(summary, routing)
        ramping = state == "ramping"
        found[f"{version.deployment_name}:{version.build_id}"] = VersionState(
            state, round(routing.ramping_version_percentage, 2) if ramping else None
        )
    return found


_STATES = {
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_CURRENT: "current",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_RAMPING: "ramping",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINING: "draining",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINED: "drained",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_INACTIVE: "inactive",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_CREATED: "created",
}
# The states in which no open run needs a version, as Temporal last checked.
_IDLE = frozenset({"drained", "inactive", "created"})


def _state_of_older_server(
    summary: WorkerDeploymentInfo.WorkerDeploymentVersionSummary, routing: RoutingConfig
) -> str:
    """A version's state from a server that reports no status: from the deployment's routing
    and the version's drainage."""
    version = summary.deployment_version
    if routing.current_deployment_version == version:
        return "current"
    if routing.ramping_deployment_version == version:
        return "ramping"
    drainage = summary.drainage_status
    if drainage == VersionDrainageStatus.VERSION_DRAINAGE_STATUS_DRAINING:
        return "draining"
    if drainage == VersionDrainageStatus.VERSION_DRAINAGE_STATUS_DRAINED:
        return "drained"
    return "inactive"


def _can_stop(stands: VersionState | None, pinned: int) -> bool | None:
    """Whether a version's workers can stop: no new run goes to it, Temporal sees no open run
    pinned to it, and visibility counts none (None: no deployment knows the version)."""
    if stands is None:
        return False if pinned else None
    return stands.state in _IDLE and pinned == 0


def _first_line(err: RPCError) -> str:
    return (err.message.strip() or type(err).__name__).splitlines()[0]
