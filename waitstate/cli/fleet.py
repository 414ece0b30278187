"""The commands for the fleet: `ops` (waits, overdue waits, failures at a glance) and
`cleanup` (the blobs of ended runs, once or on a schedule)."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from waitstate.cleanup import SCHEDULE_ID, parse_duration
from waitstate.cli.output import print_json
from waitstate.client import Wait, WaitstateClient, fleet_report
from waitstate.settings import Settings
from waitstate.tracing import Tracing
from waitstate.wording import count_of, span


async def cmd_ops(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """The fleet from visibility queries: runs by status and by what they wait for, the
    oldest wait, waits past their expiry (stuck: is a worker down?), recent failures."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    report = fleet_report(await client.fleet())
    failures = [
        {"run_id": failed.run_id, "status": failed.status, "closed": str(failed.closed)}
        for failed in report.recent_failures
    ]
    if args.json:
        print_json(
            {
                "running_by_status": report.running_by_status,
                "waiting_for": report.waiting_for,
                "oldest_wait": _wait_json(report.oldest_wait) if report.oldest_wait else None,
                "overdue": [_wait_json(wait) for wait in report.overdue],
                "recent_failures": failures,
            }
        )
        return 0
    by_status, by_wait = report.running_by_status, report.waiting_for
    print("running:", ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "none")
    print("waiting for:", ", ".join(f"{n} {k}" for k, n in sorted(by_wait.items())) or "nothing")
    if (oldest := report.oldest_wait) is not None:
        print(
            f"oldest waiting run: {oldest.run_id} ({oldest.waiting_for}), "
            f"started {oldest.started.isoformat()}"
        )
    for wait in report.overdue:
        expires = wait.expires_at.isoformat() if wait.expires_at else None
        print(
            f"OVERDUE: {wait.run_id} waiting for {wait.waiting_for}, expired "
            f"{expires} and still open: is a worker running?"
        )
    for failure in failures[:10]:
        print(f"failed: {failure['run_id']} ({failure['status']}) at {failure['closed']}")
    return 0


async def cmd_cleanup(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Run the blob cleanup once and print what it did, or (--schedule) create or update the
    schedule that runs it."""
    client = await WaitstateClient.connect(settings, tracing=tracing)
    retention = "the namespace's retention" if args.retention is None else span(args.retention)
    if args.schedule:
        done = await client.schedule_blob_cleanup(every=args.every, retention=args.retention)
        if args.json:
            print_json({"schedule": SCHEDULE_ID, "done": done, "every": str(args.every)})
            return 0
        print(
            f"schedule {SCHEDULE_ID} {done}: a blob cleanup every {span(args.every)} on task queue "
            f"{settings.task_queue}, keeping blobs for {retention} after their runs end"
        )
        return 0
    result = await client.clean_blobs(retention=args.retention)
    if args.json:
        print_json(result.model_dump(mode="json"))
        return 0
    print(
        f"examined {count_of(result.examined, 'blob')}, deleted {result.deleted} "
        f"({count_of(result.bytes_deleted, 'byte')}) of runs ended over {span(result.retention)} "
        "ago"
    )
    print(
        f"kept: {result.kept_open} of open runs, {result.kept_recent} recent, "
        f"{result.unowned} unowned"
    )
    if result.restored:
        print(f"put back {result.restored} set aside by a cleanup that did not finish")
    return 0


def duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _wait_json(wait: Wait) -> dict[str, Any]:
    return {
        "run_id": wait.run_id,
        "waiting_for": wait.waiting_for,
        "pending_operations": wait.pending_operations,
        "started": wait.started.isoformat(),
        "expires_at": wait.expires_at.isoformat() if wait.expires_at else None,
        "overdue": wait.overdue,
    }
