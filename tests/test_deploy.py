"""The deployment sketch (`deploy/`), checked: the Grafana dashboard queries only metrics that a
real worker and gateway export, after runs that move every one of them; the compose file runs
the processes docs/deploy.md describes, with the variables the code reads, and Prometheus
scrapes them where they serve their metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from scripts.services import SERVER_TUNING
from tests.helpers import eventually
from tests.rigs import (
    EXPORT_TASK,
    EXPORT_TOOLS,
    REFUND_TASK,
    REFUND_TOOLS,
    Services,
    service_port,
)
from tests.tiers import SUBPROCESS, TEMPORAL, needs
from waitstate.client import WaitstateClient
from waitstate.schemas import RunInput, RunState
from waitstate.schemas.approvals import DecideInput
from waitstate.schemas.questions import AnswerInput
from waitstate.settings import Settings
from waitstate.workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "waitstate.json"
COMPOSE = DEPLOY / "compose.yaml"
PROMETHEUS = DEPLOY / "prometheus.yml"
# The purge's scripts (a job that asks a person to confirm mid-flight), served beside the demo.
APPS = "examples.demo.app:app,tests.workflows.questions_app:app"
RUN_WITHIN = 90.0

# --- What a dashboard expression queries ---------------------------------------------------------

# Words of PromQL that are neither functions (always followed by `(`) nor metric names.
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    | {"and", "or", "unless", "atan2", "inf", "nan"}
)
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_WORD = re.compile(r"(?<![\w$:.])([A-Za-z_:][\w:]*)(\s*\()?")


# The prefixes of what the gateway exports; the rest is the workers'.
GATEWAY_METRICS = ("waitstate_gateway_", "waitstate_runs")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: every identifier that is not a function (a
    word followed by `(`), a keyword, a label name (inside `{...}` or a `by (...)` list), a
    label value, a range, a number or a Grafana variable."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values, strings
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)  # ranges, subqueries' steps
    expr = re.sub(r"\$\{?\w+\}?", "", expr)  # Grafana variables: $__rate_interval, ${x}
    expr = _LABEL_LISTS.sub(" ", expr)
    return {
        word for word, call in _WORD.findall(expr) if not call and word.lower() not in _KEYWORDS
    }


def test_metric_names_are_read_from_promql() -> None:
    quantile = (
        'histogram_quantile(0.95, sum by (le, tool) (rate(op_duration_bucket{tool=~"a|b",'
        'le!="+Inf"}[$__rate_interval])))'
    )
    assert metric_names(quantile) == {"op_duration_bucket"}
    pending = 'sum(started) - (sum(finished{outcome!="x"}) or vector(0)) > bool 1'
    assert metric_names(pending) == {"started", "finished"}
    assert metric_names("sum by (code, status) (increase(refusals_total[5m] offset 1h))") == {
        "refusals_total"
    }
    assert metric_names("a / on (instance) group_left (version) b * 60") == {"a", "b"}


def _dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in dashboard["panels"] if panel["type"] not in ("row", "text")]


def _dashboard_metrics() -> dict[str, set[str]]:
    """Each metric the dashboard queries (its panels and its variables), with where."""
    dashboard = _dashboard()
    used: dict[str, set[str]] = {}
    for panel in _query_panels(dashboard):
        for target in panel["targets"]:
            for name in metric_names(target["expr"]):
                used.setdefault(name, set()).add(panel["title"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            [name] = re.findall(r"label_values\((\w+)\s*,", variable["definition"])
            used.setdefault(name, set()).add(f"${variable['name']}")
    return used


def test_the_dashboard_is_well_formed() -> None:
    dashboard = _dashboard()
    panels = dashboard["panels"]
    query_panels = _query_panels(dashboard)
    [source] = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    variable = {"type": "prometheus", "uid": f"${{{source['name']}}}"}

    assert dashboard["schemaVersion"] >= 39 and dashboard["uid"] and dashboard["title"]
    assert source["query"] == "prometheus"
    assert len({panel["id"] for panel in panels}) == len(panels), "panel ids are unique"
    assert len(query_panels) >= 15
    for panel in query_panels:
        assert panel["datasource"] == variable, panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == variable, panel["title"]
            assert metric_names(target["expr"]), (panel["title"], target["expr"])
        assert panel["title"] and panel["description"]
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
    # The ops strip the issue asks for: every part of it has a panel of its own.
    titles = " | ".join(panel["title"].lower() for panel in panels)
    for part in (
        "runs by status",
        "by what they wait for",
        "operations pending",
        "completion latency",
        "expired waits",
        "cancels",
        "cancel failures",
        "resume failures",
        "refused",
        "approval",
        "question",
        "model calls",
        "model tokens",
    ):
        assert part in titles, part


# --- The processes, exporting what the dashboard queries ------------------------------------------


@pytest.fixture(scope="module")
@needs(TEMPORAL, SUBPROCESS)
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """`make up`'s worker, gateway, demo systems and dev server, serving the demo and the
    purge's scripts, with the worker's metrics on (a free port), and the dev server's HTTP API
    and metrics on ports of their own."""
    state = tmp_path_factory.mktemp("deploy")
    env: dict[str, str | None] = {
        "WAITSTATE_APPS": APPS,
        "TEMPORAL_HTTP_PORT": str(service_port()),
        "TEMPORAL_METRICS_PORT": str(service_port()),
    }
    with Services(state, env).up() as running:
        yield running


async def test_make_up_serves_the_dev_servers_http_api_and_metrics_where_told(
    services: Services,
) -> None:
    http_port, metrics_port = (
        services.env["TEMPORAL_HTTP_PORT"],
        services.env["TEMPORAL_METRICS_PORT"],
    )
    async with httpx.AsyncClient(timeout=10) as http:
        namespaces = await http.get(f"http://127.0.0.1:{http_port}/api/v1/namespaces")
        metrics = await http.get(f"http://127.0.0.1:{metrics_port}/metrics")

    assert namespaces.status_code == 200, namespaces.text
    assert "default" in {n["namespaceInfo"]["name"] for n in namespaces.json()["namespaces"]}
    assert metrics.status_code == 200
    assert "# TYPE " in metrics.text


def _exported(text: str) -> set[str]:
    """The names of the samples in a Prometheus exposition."""
    return {
        match.group(1) for match in re.finditer(r"^([A-Za-z_:][\w:]*)(?:\{|\s)", text, re.MULTILINE)
    }


async def _scrape(http: httpx.AsyncClient, url: str) -> set[str]:
    response = await http.get(url)
    response.raise_for_status()
    return _exported(response.text)


async def _ended(client: WaitstateClient, run_id: str) -> RunState:
    async with asyncio.timeout(RUN_WITHIN):
        return await client.outcome(run_id)


async def _open_operation(client: WaitstateClient, run_id: str) -> bool:
    state = await client.query(run_id)
    return any(op.status == "running" for op in state.operations.values())


async def _approve(client: WaitstateClient, run_id: str) -> RunState:
    async def request() -> str | None:
        requests = await client.open_requests(run_id)
        return requests[0].request_id if requests else None

    request_id = await eventually(request, f"the approval request of {run_id}")
    await client.decide(run_id, DecideInput(request_id=request_id, decision="approve"))
    return await _ended(client, run_id)


async def _confirm(client: WaitstateClient, run_id: str) -> RunState:
    async def question() -> str | None:
        questions = await client.open_questions(run_id)
        return questions[0].question_id if questions else None

    question_id = await eventually(question, f"the purge's question in {run_id}", within=60)
    answer = AnswerInput(question_id=question_id, action="accept", content={"confirm": True})
    await client.answer(run_id, answer)
    return await _ended(client, run_id)


async def _cancelled(client: WaitstateClient, run_id: str) -> RunState:
    await eventually(lambda: _open_operation(client, run_id), f"{run_id}'s export to start")
    await client.cancel(run_id)
    return await _ended(client, run_id)


async def test_every_metric_the_dashboard_queries_is_exported(services: Services) -> None:
    client = await WaitstateClient.connect(Settings.from_env(services.env))
    worker_metrics = f"http://{services.env['WAITSTATE_WORKER_METRICS']}/metrics"
    gateway_metrics = f"{services.gateway_url}/metrics"
    used = _dashboard_metrics()
    async with httpx.AsyncClient(timeout=10) as http:
        faults = f"{services.systems_url}/_test/faults"
        # Runs that end each way, move every custom counter, and ask a person twice.
        export = await client.start(RunInput(task=EXPORT_TASK, tools=EXPORT_TOOLS))
        refund = await client.start(RunInput(task=REFUND_TASK, tools=REFUND_TOOLS))
        purge = await client.start(
            RunInput(task="purge staging_events", model="scripted:purge", tools=["purge_dataset"])
        )
        failed = await client.start(RunInput(task="fail", model="scripted:no-such-script"))
        continued = await client.start(
            RunInput(
                task="loop", model="scripted:forever", max_turns=6, continue_as_new_after_events=10
            )
        )
        forged = await http.post(
            f"{services.gateway_url}/v1/operations/op_x/complete",
            json={"status": "succeeded"},
            headers={"Authorization": "Bearer not-a-token"},
        )
        ended = await asyncio.gather(
            _ended(client, export.run_id),
            _approve(client, refund.run_id),
            _confirm(client, purge.run_id),
            _ended(client, failed.run_id),
            _ended(client, continued.run_id),
        )
        assert [state.status for state in ended] == [
            "completed",
            "completed",
            "completed",
            "failed",
            "max_turns",
        ], [state.error for state in ended]
        assert forged.status_code == 401

        # Jobs that never finish: one expires (and is cancelled), one run is cancelled, and one
        # expires while the demo systems are down, so its cancel fails for good.
        (await http.post(faults, json={"never_complete": True})).raise_for_status()
        expiring = RunInput(
            task=EXPORT_TASK, tools=EXPORT_TOOLS, operation_timeout=timedelta(seconds=1)
        )
        expired = await client.start(expiring)
        cancelled = await client.start(RunInput(task=EXPORT_TASK, tools=EXPORT_TOOLS))
        await _ended(client, expired.run_id)
        assert (await _cancelled(client, cancelled.run_id)).status == "cancelled"
        orphaned = await client.start(
            expiring.model_copy(update={"operation_timeout": timedelta(seconds=3)})
        )
        await eventually(lambda: _open_operation(client, orphaned.run_id), "the export to start")
        systems = int((services.state / "systems.pid").read_text())
        os.kill(systems, signal.SIGTERM)

        async def all_exported() -> bool:
            # The SDK exports on an interval, and the cancel gives up after its retries.
            exported = await _scrape(http, worker_metrics) | await _scrape(http, gateway_metrics)
            return used.keys() <= exported

        with contextlib.suppress(AssertionError):  # said below, metric by metric
            await eventually(all_exported, "every metric the dashboard queries", within=60)
        worker = await _scrape(http, worker_metrics)
        gateway = await _scrape(http, gateway_metrics)

    missing = {
        name: sorted(panels) for name, panels in used.items() if name not in worker | gateway
    }
    assert not missing, f"queried by the dashboard, exported by no process: {missing}"
    # The gateway's own (its deliveries, and the fleet's runs it counts), and the workers'.
    by_gateway = {name for name in used if name.startswith(GATEWAY_METRICS)}
    assert by_gateway <= gateway
    assert used.keys() - by_gateway <= worker


# --- The compose file ----------------------------------------------------------------------------

# Example values for the variables compose.yaml requires from the shell that runs it.
COMPOSE_SHELL = {"WAITSTATE_TOKEN_KEYS": "k1:" + "s" * 40}
# Where the code reads the environment: the settings, the gateway, the worker, the demo app.
SOURCES = [ROOT / "worker.py", *sorted((ROOT / "waitstate").rglob("*.py"))]
SOURCES += sorted((ROOT / "examples").rglob("*.py"))


def _yaml(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def _interpolate(value: str, shell: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}`, from `shell`."""

    def one(match: re.Match[str]) -> str:
        name, kind, rest = match.group(1), match.group(2), match.group(3)
        if shell.get(name):
            return shell[name]
        assert kind != "?", f"compose.yaml requires {name}: {rest}"
        return rest if kind == "-" else ""

    return re.sub(r"\$\{(\w+)(?::([-?])([^}]*))?\}", one, value)


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment as a mapping"
    return {name: _interpolate(str(value), COMPOSE_SHELL) for name, value in env.items()}


def _targets(prometheus: dict[str, Any], job: str) -> tuple[list[str], int]:
    [config] = [c for c in prometheus["scrape_configs"] if c["job_name"] == job]
    assert config.get("metrics_path", "/metrics") == "/metrics"
    [discovery] = config["dns_sd_configs"]
    return list(discovery["names"]), int(discovery["port"])


def test_compose_runs_the_processes_with_what_they_read() -> None:
    compose = _yaml(COMPOSE)
    services = compose["services"]
    worker, gateway, temporal = services["worker"], services["gateway"], services["temporal"]
    worker_env, gateway_env = _environment(worker), _environment(gateway)
    code = "\n".join(path.read_text() for path in SOURCES)

    assert {"temporal", "worker", "gateway", "prometheus", "grafana"} <= services.keys()
    assert worker["command"] == ["python", "worker.py"]
    assert gateway["command"] == ["python", "-m", "waitstate.gateway"]
    for name in ("worker", "gateway", "systems"):
        for variable in _environment(services[name]):
            assert f'"{variable}"' in code, f"{name} sets {variable}, which no code reads"
    # What each needs, read as the process reads it.
    worker_settings, gateway_settings = (
        Settings.from_env(worker_env),
        Settings.from_env(gateway_env),
    )
    for settings in (worker_settings, gateway_settings):
        assert settings.token_keys == {"k1": "s" * 40}
        host, _, port = settings.temporal_address.rpartition(":")
        assert host == "temporal" and f"{port}:{port}" in temporal["ports"][0]
    assert worker_settings.worker_metrics_address == "0.0.0.0:9464"
    assert worker_settings.gateway_url == f"http://gateway:{gateway_settings.gateway_port}"
    assert gateway_settings.gateway_host == "0.0.0.0"
    # Threads the gateway starts are served by the workers; none without an operator key.
    assert gateway_settings.task_queue == worker_settings.task_queue
    assert gateway_settings.operator_keys == {}
    # The blob store is shared: a volume every worker mounts where WAITSTATE_BLOB_DIR points.
    assert f"blobs:{worker_settings.blob_dir}" in worker["volumes"]
    assert "blobs" in compose["volumes"]
    # The dev server registers the runs' search attributes, and is tuned, as `make up`'s is
    # (one partition per queue among it: the model queue's rate held by one limiter).
    command = temporal["command"]
    assert command[:3] == ["temporal", "server", "start-dev"]
    pairs = list(zip(command, command[1:], strict=False))
    assert all(pair in pairs for pair in zip(SERVER_TUNING[::2], SERVER_TUNING[1::2], strict=True))
    registered = {command[i + 1] for i, arg in enumerate(command) if arg == "--search-attribute"}
    kinds = {"KEYWORD": "Keyword", "INT": "Int", "DATETIME": "Datetime"}
    assert registered == {f"{k.name}={kinds[k.indexed_value_type.name]}" for k in SEARCH_ATTRIBUTES}
    # Every file compose mounts or builds from exists.
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), volume
        if "build" in service:
            build = service["build"]
            assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()


def test_prometheus_scrapes_each_process_where_it_serves_metrics() -> None:
    services = _yaml(COMPOSE)["services"]
    prometheus = _yaml(PROMETHEUS)
    worker = Settings.from_env(_environment(services["worker"]))
    gateway = Settings.from_env(_environment(services["gateway"]))

    assert worker.worker_metrics_address is not None
    assert _targets(prometheus, "waitstate-worker") == (
        ["worker"],
        int(worker.worker_metrics_address.rpartition(":")[2]),
    )
    assert _targets(prometheus, "waitstate-gateway") == (["gateway"], gateway.gateway_port)
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in services["prometheus"]["volumes"]


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard() -> None:
    grafana = _yaml(COMPOSE)["services"]["grafana"]
    provisioning = DEPLOY / "grafana" / "provisioning"
    [source] = _yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    [provider] = _yaml(provisioning / "dashboards" / "waitstate.yml")["providers"]
    mounts = dict(volume.split(":")[:2] for volume in grafana["volumes"])

    assert source["type"] == "prometheus" and source["isDefault"]
    assert source["url"] == "http://prometheus:9090"
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    assert mounts["./grafana/waitstate.json"] == f"{provider['options']['path']}/waitstate.json"


def test_the_deployment_doc_names_every_process_and_variable() -> None:
    doc = (ROOT / "docs" / "deploy.md").read_text()
    services = _yaml(COMPOSE)["services"]

    for name, service in services.items():
        assert f"`{name}`" in doc, name
        for variable in service.get("environment", {}):
            if not variable.startswith("GF_"):
                assert f"`{variable}`" in doc, variable
    # And what the shell that runs compose may set (ports' addresses included).
    for variable in re.findall(r"\$\{(\w+)", COMPOSE.read_text()):
        assert f"`{variable}`" in doc, variable
    assert "deploy/grafana/waitstate.json" in doc


def _published(service: dict[str, Any], shell: dict[str, str]) -> list[tuple[str, int, int]]:
    """A service's published ports as (host address, host port, container port)."""
    published = []
    for port in service.get("ports", []):
        assert isinstance(port, str), f"short syntax, with the host address: {port!r}"
        parts = _interpolate(port, shell).split(":")
        if len(parts) == 2:  # no address: Docker publishes it on every interface
            parts.insert(0, "0.0.0.0")
        address, host_port, container_port = parts
        published.append((address, int(host_port), int(container_port)))
    return published


def test_compose_publishes_only_what_must_be_reached_and_on_loopback_by_default() -> None:
    services = _yaml(COMPOSE)["services"]
    published = {name: _published(service, COMPOSE_SHELL) for name, service in services.items()}
    opened = _published(
        services["gateway"], {**COMPOSE_SHELL, "GATEWAY_PUBLISH_ADDRESS": "0.0.0.0"}
    )

    # Nothing but the gateway checks who calls: every port is on loopback unless told.
    assert {address for ports in published.values() for address, _, _ in ports} == {"127.0.0.1"}
    assert not any(service.get("network_mode") == "host" for service in services.values())
    # The demo's outbox lists every link's token: not published at all.
    assert published["systems"] == []
    assert {port for _, _, port in published["temporal"]} == {7233, 8233}
    assert published["gateway"] == [("127.0.0.1", 8787, 8787)]
    # The gateway is what outsiders must reach: one variable publishes it elsewhere.
    assert opened == [("0.0.0.0", 8787, 8787)]
    assert published["prometheus"] == [("127.0.0.1", 9090, 9090)]
    assert published["grafana"] == [("127.0.0.1", 3000, 3000)]
    assert published["worker"] == []
