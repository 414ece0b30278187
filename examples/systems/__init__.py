"""The demo's external systems, in one FastAPI app: what the long and sync demo tools call.

One module per service, each with its HTTP bodies, its behaviour and its routes:

- `exports`: the export service, a long job that completes by webhook, and its files;
- `pipeline`: the enrichment pipeline, a long job that is polled;
- `purges`: the purge service, a long job that asks a person by webhook, then completes;
- `folders`: the compliance folder; `notifications`: notifications to teams;
- `refunds`: claims and refunds (the claims are seeded);
- `approvals_outbox`: where runs post approval requests for people to read.

What they share: `jobs` (long jobs started once per idempotency key, looked at, cancelled,
each run by a task of its own), `webhooks` (sent as real senders send them: one that was not
taken, with no answer, a 5xx, 408 or 429, is sent again with backoff, 0.5 s doubling up to
30 s, for 10 minutes; any other answer is the receiver's final word), `faults` (the failures
tests inject) and `hooks` (the `/_test/*` routes: stats, faults, reset). `state` holds them
together (`DemoSystems`), `app` makes the ASGI app (`create_app`), `serving` serves an app in
a running event loop. Each module's docstring lists its routes.

Everything is kept in memory on the app (`app.state.systems`).

Usage::

    python -m examples.systems --port 8790 [--export-seconds 2] [--pipeline-seconds 3]
        [--webhook-give-up-seconds 600] [--webhook-max-backoff-seconds 30]
"""

from examples.systems.app import create_app
from examples.systems.faults import Faults
from examples.systems.hooks import JobStats, Stats
from examples.systems.jobs import JobRecord, JobView, LongJobs
from examples.systems.serving import serving
from examples.systems.state import DemoSystems
from examples.systems.webhooks import WebhookAttempt, WebhookRetry

__all__ = [
    "DemoSystems",
    "Faults",
    "JobRecord",
    "JobStats",
    "JobView",
    "LongJobs",
    "Stats",
    "WebhookAttempt",
    "WebhookRetry",
    "create_app",
    "serving",
]
