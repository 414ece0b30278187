"""Settings read from explicit environments, how model specs resolve to providers, and how a
client program ends."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from waitstate.notices import EmailRoute, OutboxRoute, SlackRoute, SmtpServer
from waitstate.providers import LaterModelError, Provider, Providers, UnknownModelError
from waitstate.providers.scripted import ScriptedProvider
from waitstate.schemas.errors import LATER_MODEL_INVALID, MODEL_SPEC_INVALID
from waitstate.settings import Settings


def test_defaults() -> None:
    settings = Settings.from_env({})

    assert settings.temporal_address == "127.0.0.1:7233"
    assert settings.namespace == "default"
    assert settings.task_queue == "waitstate-agents"
    assert settings.ui_url == "http://127.0.0.1:8233"
    assert settings.default_model == "scripted:demo"
    assert settings.openai_api_key is None
    assert settings.anthropic_api_key is None
    assert settings.max_cached_workflows == 100
    assert settings.state_dir == Path(".temporal")


def test_overrides() -> None:
    settings = Settings.from_env(
        {
            "TEMPORAL_ADDRESS": "temporal.internal:7233",
            "TEMPORAL_NAMESPACE": "agents",
            "WAITSTATE_TASK_QUEUE": "q",
            "TEMPORAL_UI_PORT": "9000",
            "WAITSTATE_MAX_CACHED_WORKFLOWS": "7",
            "WAITSTATE_STATE_DIR": "/var/lib/waitstate",
        }
    )

    assert settings.temporal_address == "temporal.internal:7233"
    assert settings.namespace == "agents"
    assert settings.task_queue == "q"
    assert settings.ui_url == "http://127.0.0.1:9000"
    assert settings.max_cached_workflows == 7
    assert settings.state_dir == Path("/var/lib/waitstate")


def test_ui_url_wins_over_port_and_loses_its_trailing_slash() -> None:
    env = {"TEMPORAL_UI_URL": "https://ui.example.com/", "TEMPORAL_UI_PORT": "9000"}

    assert Settings.from_env(env).ui_url == "https://ui.example.com"


@pytest.mark.parametrize(
    ("env", "model"),
    [
        ({}, "scripted:demo"),
        ({"OPENAI_API_KEY": "sk-x"}, "openai:gpt-4.1"),
        ({"ANTHROPIC_API_KEY": "sk-ant-x"}, "anthropic:claude-sonnet-4-5"),
        ({"OPENAI_API_KEY": "sk-x", "ANTHROPIC_API_KEY": "sk-ant-x"}, "openai:gpt-4.1"),
        ({"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "sk-ant-x"}, "anthropic:claude-sonnet-4-5"),
        ({"WAITSTATE_MODEL": "scripted:echo", "OPENAI_API_KEY": "sk-x"}, "scripted:echo"),
        ({"WAITSTATE_MODEL": "", "OPENAI_API_KEY": "sk-x"}, "openai:gpt-4.1"),
    ],
)
def test_default_model(env: dict[str, str], model: str) -> None:
    assert Settings.from_env(env).default_model == model


def test_keys_are_kept_out_of_repr() -> None:
    settings = Settings.from_env({"OPENAI_API_KEY": "sk-secret", "ANTHROPIC_API_KEY": "sk-ant"})

    assert settings.openai_api_key == "sk-secret"
    assert "sk-secret" not in repr(settings)
    assert "sk-ant" not in repr(settings)


@pytest.mark.parametrize(
    ("run_id", "url"),
    [
        (None, "http://127.0.0.1:8233/namespaces/default/workflows/run-1"),
        ("abc", "http://127.0.0.1:8233/namespaces/default/workflows/run-1/abc/history"),
    ],
)
def test_run_url(run_id: str | None, url: str) -> None:
    assert Settings.from_env({}).run_url("run-1", run_id) == url


def test_a_sub_agents_run_url_keeps_its_id_one_segment() -> None:
    url = Settings.from_env({}).run_url("run-1/researcher-2")

    assert url == "http://127.0.0.1:8233/namespaces/default/workflows/run-1%2Fresearcher-2"


@pytest.mark.parametrize("spec", ["demo", "scripted:", ":demo", ""])
def test_resolve_rejects_malformed_specs(spec: str) -> None:
    with pytest.raises(UnknownModelError, match="is not provider:model"):
        Providers({"scripted": ScriptedProvider}).resolve(spec)


def test_resolve_rejects_unknown_providers() -> None:
    providers = Providers({"scripted": ScriptedProvider, "openai": ScriptedProvider})

    with pytest.raises(
        UnknownModelError, match="unknown provider 'mistral'.*known: openai, scripted"
    ):
        providers.resolve("mistral:large")


def test_resolve_creates_each_provider_once() -> None:
    created: list[Provider] = []

    def factory() -> Provider:
        created.append(ScriptedProvider())
        return created[-1]

    providers = Providers({"scripted": factory})

    first, demo = providers.resolve("scripted:demo")
    second, echo = providers.resolve("scripted:echo")

    assert (demo, echo) == ("demo", "echo")
    assert first is second is created[0]
    assert len(created) == 1


def test_resolve_creates_providers_lazily() -> None:
    def unavailable() -> Provider:
        raise UnknownModelError("openai: OPENAI_API_KEY is not set on the worker")

    providers = Providers({"openai": unavailable, "scripted": ScriptedProvider})

    provider, model = providers.resolve("scripted:demo")
    assert (provider.name, model) == ("scripted", "demo")
    with pytest.raises(UnknownModelError, match="OPENAI_API_KEY"):
        providers.resolve("openai:gpt-4.1")


@pytest.mark.parametrize(
    ("later", "says"),
    [
        ("mistral:large", "'mistral:large' cannot be called on this worker: unknown provider"),
        ("scripted:nope", "'scripted:nope' cannot be called on this worker: no script named"),
        ("openai:gpt-4.1-mini", "'openai:gpt-4.1-mini' cannot be called on this worker: openai: "),
    ],
)
def test_resolve_checks_the_models_the_caller_would_go_on_with(later: str, says: str) -> None:
    def unavailable() -> Provider:
        raise UnknownModelError("openai: OPENAI_API_KEY is not set on the worker")

    providers = Providers({"openai": unavailable, "scripted": ScriptedProvider})

    with pytest.raises(LaterModelError, match=re.escape(says)) as refused:
        providers.resolve("scripted:demo", later=[later])
    assert refused.value.failure_type == LATER_MODEL_INVALID
    assert providers.resolve("scripted:demo", later=["scripted:echo"])[1] == "demo"
    with pytest.raises(UnknownModelError) as own:  # the call's own model, named as it was
        providers.resolve("mistral:large", later=[later])
    assert own.value.failure_type == MODEL_SPEC_INVALID


def test_the_gateway_counts_runs_every_30_seconds_unless_told_otherwise() -> None:
    assert Settings.from_env({}).run_counts_seconds == 30.0
    assert Settings.from_env({"WAITSTATE_RUN_COUNTS_SECONDS": "0"}).run_counts_seconds == 0.0
    with pytest.raises(ValueError, match="WAITSTATE_RUN_COUNTS_SECONDS must be a number"):
        Settings.from_env({"WAITSTATE_RUN_COUNTS_SECONDS": "soon"})


def test_versioning_is_off_unless_turned_on_and_names_the_deployment_and_build() -> None:
    off = Settings.from_env({})
    on = Settings.from_env(
        {"WAITSTATE_VERSIONING": "1", "WAITSTATE_DEPLOYMENT": "agents", "WAITSTATE_BUILD_ID": "b7"}
    )

    assert (off.versioning, off.deployment, off.build_id) == (False, "waitstate", None)
    assert (on.versioning, on.deployment, on.build_id) == (True, "agents", "b7")
    assert Settings.from_env({"WAITSTATE_VERSIONING": "false"}).versioning is False


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("WAITSTATE_VERSIONING", "maybe", "WAITSTATE_VERSIONING must be 1 or 0"),
        ("WAITSTATE_DEPLOYMENT", "agents.v2", "WAITSTATE_DEPLOYMENT must not contain '.'"),
        ("WAITSTATE_BUILD_ID", "b" * 256, "WAITSTATE_BUILD_ID must be at most 255 characters"),
    ],
)
def test_a_malformed_versioning_variable_is_named(variable: str, value: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Settings.from_env({variable: value})


def test_operator_keys_and_the_thread_tokens_lifetime() -> None:
    unset = Settings.from_env({})
    given = Settings.from_env(
        {
            "WAITSTATE_OPERATOR_KEYS": f"ops:{'o' * 32}, ci:{'c' * 40}",
            "WAITSTATE_THREAD_TOKEN_DAYS": "7.5",
        }
    )

    assert (unset.operator_keys, unset.thread_token_lifetime) == ({}, timedelta(days=30))
    assert given.operator_keys == {"ops": "o" * 32, "ci": "c" * 40}
    assert given.thread_token_lifetime == timedelta(days=7, hours=12)
    assert "o" * 32 not in repr(given)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"WAITSTATE_OPERATOR_KEYS": "no-secret"}, "WAITSTATE_OPERATOR_KEYS entries must be"),
        ({"WAITSTATE_OPERATOR_KEYS": "ops:tiny-secret"}, "operator key 'ops' is too short"),
        ({"WAITSTATE_THREAD_TOKEN_DAYS": "0"}, "WAITSTATE_THREAD_TOKEN_DAYS must be"),
        ({"WAITSTATE_THREAD_TOKEN_DAYS": "367"}, "at most 366"),
        ({"WAITSTATE_THREAD_TOKEN_DAYS": "nan"}, "WAITSTATE_THREAD_TOKEN_DAYS must be"),
        ({"WAITSTATE_THREAD_TOKEN_DAYS": "a month"}, "WAITSTATE_THREAD_TOKEN_DAYS must be"),
    ],
)
def test_a_malformed_operator_key_or_token_lifetime_is_named(
    env: dict[str, str], says: str
) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        Settings.from_env(env)
    assert "tiny-secret" not in str(refused.value)  # a secret is never repeated


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        ("print('done', end='')", 0, ""),
        ("print('done', end=''); return 3", 3, ""),
        ("print('done', end=''); raise LookupError('no such run')", 1, "LookupError: no such run"),
    ],
)
def test_a_program_run_by_run_program_exits_with_what_main_returned_and_its_output_written(
    body: str, code: int, says: str
) -> None:
    program = (
        f"import waitstate\n\nasync def main():\n    {body}\n\nwaitstate.run_program(main())\n"
    )
    ended = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert (ended.returncode, ended.stdout) == (code, "done")
    assert says in ended.stderr


# --- where notices go --------------------------------------------------------------------------


def test_notices_go_to_the_outbox_unless_routed() -> None:
    settings = Settings.from_env({})

    assert (settings.notice_routes, settings.smtp) == ({}, None)


def test_notice_routes_and_the_smtp_server_are_read_and_their_secrets_kept_out_of_repr() -> None:
    webhook = "https://hooks.slack.com/services/T1/B1/webhook-secret"
    settings = Settings.from_env(
        {
            "WAITSTATE_NOTICE_ROUTES": f"claims-team=email:claims@example.com;finance=slack:"
            f"{webhook};*=outbox",
            "WAITSTATE_SMTP_URL": "smtp://mailer:smtp-password@mail.example.com:587",
            "WAITSTATE_SMTP_FROM": "Waitstate <noreply@example.com>",
        }
    )

    assert settings.notice_routes == {
        "claims-team": (EmailRoute(("claims@example.com",)),),
        "finance": (SlackRoute(webhook),),
        "*": (OutboxRoute(),),
    }
    assert settings.smtp == SmtpServer(
        "mail.example.com", 587, False, "Waitstate <noreply@example.com>", "mailer", "smtp-password"
    )
    shown = repr(settings)
    assert "smtp-password" not in shown and "webhook-secret" not in shown
    assert "mail.example.com" in shown and "hooks.slack.com" in shown


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"WAITSTATE_NOTICE_ROUTES": "claims-team"}, "WAITSTATE_NOTICE_ROUTES: entry 1 is not"),
        (
            {"WAITSTATE_NOTICE_ROUTES": "finance=slack:http://hooks.example.com/smtp-password"},
            "WAITSTATE_NOTICE_ROUTES: group 'finance': the Slack webhook must be an https://",
        ),
        (
            {"WAITSTATE_NOTICE_ROUTES": "claims-team=email:claims@example.com"},
            "sends group 'claims-team' email, and WAITSTATE_SMTP_URL is not set",
        ),
        (
            {"WAITSTATE_SMTP_URL": "smtp://mailer:smtp-password@mail.example.com"},
            "WAITSTATE_SMTP_FROM must be set",
        ),
        (
            {
                "WAITSTATE_SMTP_URL": "mail.example.com:smtp-password",
                "WAITSTATE_SMTP_FROM": "a@b.c",
            },
            "WAITSTATE_SMTP_URL is not an smtp:// or smtps:// URL",
        ),
    ],
)
def test_a_malformed_notice_route_or_smtp_setting_stops_the_process_at_start(
    env: dict[str, str], says: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(says)) as refused:
        Settings.from_env(env)
    assert "smtp-password" not in str(refused.value)  # a secret is never repeated


def test_model_calls_go_on_the_runs_queue_unless_a_model_queue_is_named_with_its_rate() -> None:
    off = Settings.from_env({})
    on = Settings.from_env(
        {"WAITSTATE_MODEL_TASK_QUEUE": "models", "WAITSTATE_MODEL_CALLS_PER_SECOND": "2.5"}
    )
    unlimited = Settings.from_env({"WAITSTATE_MODEL_TASK_QUEUE": "models"})

    assert (off.model_task_queue, off.model_calls_per_second) == (None, None)
    assert (on.model_task_queue, on.model_calls_per_second) == ("models", 2.5)
    assert (unlimited.model_task_queue, unlimited.model_calls_per_second) == ("models", None)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"WAITSTATE_MODEL_CALLS_PER_SECOND": "5"},
            "WAITSTATE_MODEL_CALLS_PER_SECOND needs WAITSTATE_MODEL_TASK_QUEUE",
        ),
        (
            {"WAITSTATE_MODEL_TASK_QUEUE": "m", "WAITSTATE_MODEL_CALLS_PER_SECOND": "0"},
            "must be a number of calls per second over 0; got '0'",
        ),
        (
            {"WAITSTATE_MODEL_TASK_QUEUE": "m", "WAITSTATE_MODEL_CALLS_PER_SECOND": "fast"},
            "must be a number of calls per second over 0; got 'fast'",
        ),
        (
            {"WAITSTATE_MODEL_TASK_QUEUE": "agents", "WAITSTATE_TASK_QUEUE": "agents"},
            "WAITSTATE_MODEL_TASK_QUEUE must differ from WAITSTATE_TASK_QUEUE",
        ),
        (
            {"WAITSTATE_MODEL_TASK_QUEUE": "waitstate-agents"},
            "WAITSTATE_MODEL_TASK_QUEUE must differ from WAITSTATE_TASK_QUEUE",
        ),
    ],
)
def test_a_malformed_model_queue_or_rate_is_named(env: dict[str, str], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        Settings.from_env(env)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WAITSTATE_MODEL_CALLS_PER_SECOND", "fast"),
        ("WAITSTATE_MAX_CACHED_WORKFLOWS", "many"),
        ("WAITSTATE_VERSIONING", "maybe"),
        ("WAITSTATE_NOTICE_ROUTES", "finance"),
        ("WAITSTATE_DEPLOYMENT", "a.b"),
    ],
)
def test_a_process_that_runs_no_worker_leaves_what_only_a_worker_reads_unread(
    variable: str, value: str
) -> None:
    env = {"WAITSTATE_MODEL_TASK_QUEUE": "models", variable: value}

    with pytest.raises(ValueError, match=variable):
        Settings.from_env(env)
    settings = Settings.from_env(env, worker=False)

    assert settings.model_task_queue == "models"  # a start puts it in the run's input
    assert settings.model_calls_per_second is None and settings.max_cached_workflows == 100


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"GATEWAY_PORT": "gateway"},
            "GATEWAY_PORT must be a port number (1-65535, 0 for any free one); got",
        ),
        (
            {"GATEWAY_PORT": "70000"},
            "GATEWAY_PORT must be a port number (1-65535, 0 for any free one); got",
        ),
        ({"WAITSTATE_MODEL": "openai:"}, "WAITSTATE_MODEL: model spec 'openai:' is not"),
        ({"WAITSTATE_MODEL": "gpt-4.1"}, "WAITSTATE_MODEL: model spec 'gpt-4.1' is not"),
    ],
)
def test_a_malformed_variable_every_process_reads_is_named(env: dict[str, str], says: str) -> None:
    for worker in (True, False):
        with pytest.raises(ValueError, match=re.escape(says)):
            Settings.from_env(env, worker=worker)


def test_the_a2a_push_key_is_a_long_secret() -> None:
    key = "k" * 32
    assert Settings.from_env({}).a2a_push_key is None
    assert Settings.from_env({"WAITSTATE_A2A_PUSH_KEY": key}).a2a_push_key == key
    assert key not in repr(Settings.from_env({"WAITSTATE_A2A_PUSH_KEY": key}))
    with pytest.raises(ValueError, match="WAITSTATE_A2A_PUSH_KEY"):
        Settings.from_env({"WAITSTATE_A2A_PUSH_KEY": "short"})


def test_pushes_reach_only_public_addresses_unless_networks_are_named() -> None:
    assert Settings.from_env({}).a2a_push_networks == ()
    named = Settings.from_env({"WAITSTATE_A2A_PUSH_NETWORKS": "10.1.0.0/16, 127.0.0.1"})
    assert [str(n) for n in named.a2a_push_networks] == ["10.1.0.0/16", "127.0.0.1/32"]
    with pytest.raises(ValueError, match="WAITSTATE_A2A_PUSH_NETWORKS .*'10.1.0.0/99'"):
        Settings.from_env({"WAITSTATE_A2A_PUSH_NETWORKS": "10.1.0.0/99"})
