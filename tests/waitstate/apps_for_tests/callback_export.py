"""A valid app with a long tool completed by callback: a worker needs resume-token keys and a
gateway URL to serve it."""

from __future__ import annotations

from tests.waitstate.apps_for_tests.backends import ExportArgs, IdleBackend
from waitstate import Agent, App, LongSpec, ToolSpec

start_export = ToolSpec(
    name="start_export",
    description="Export a dataset; the export system calls back when it is done.",
    args=ExportArgs,
    long=LongSpec(backend=IdleBackend(), completion="callback"),
)

app = App(agents=[Agent("exporter", model="scripted:echo", tools=[start_export])])
