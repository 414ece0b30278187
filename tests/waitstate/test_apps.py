"""Apps loaded by reference (waitstate/apps.py, over waitstate/agents.py): which references a
worker loads, the one-line errors of an app that cannot be served, and what loaded apps provide
together (agents, tools and their deps, providers, scripts), using the small apps of
tests/waitstate/apps_for_tests/."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from tests.waitstate.apps_for_tests import greetings, weather
from waitstate import AppError, RunContext, ToolCall
from waitstate.apps import Apps, app_refs, load_app, load_apps
from waitstate.providers.scripted import SCRIPTS
from waitstate.tools.spec import ToolRegistry

PACKAGE = "tests.waitstate.apps_for_tests"
GREETINGS = f"{PACKAGE}.greetings:app"
WEATHER = f"{PACKAGE}.weather:app"
CALLBACK_EXPORT = f"{PACKAGE}.callback_export:app"
WORKER_TOOLS = ["get_operation_status", "read_ref", "request_approval", "wait_for_operations"]


def ref(module: str) -> str:
    return f"{PACKAGE}.{module}:app"


def load_error(refs: Sequence[str], *, callbacks_configured: bool = True) -> str:
    """The message of the AppError loading `refs` raises, checked to be one line."""
    with pytest.raises(AppError) as caught:
        load_apps(refs, callbacks_configured=callbacks_configured)
    message = str(caught.value)
    assert "\n" not in message
    return message


# app_refs


def test_app_refs_are_cli_values_then_env_values_each_once() -> None:
    refs = app_refs(["a.app:app", "b.app:app", "a.app:app"], " c.app:app,a.app:app , d.app:app")

    assert refs == ["a.app:app", "b.app:app", "c.app:app", "d.app:app"]


def test_app_refs_drop_blank_values() -> None:
    assert app_refs(["", "a.app:app"], " , ,a.app:app,,") == ["a.app:app"]


@pytest.mark.parametrize(("cli", "env"), [((), None), ((), ""), ([""], " , ")])
def test_no_app_refs_when_nothing_is_named(cli: Sequence[str], env: str | None) -> None:
    assert app_refs(cli, env) == []


# load_app


def test_load_app_returns_the_app_the_reference_names() -> None:
    assert load_app(GREETINGS) is greetings.app


@pytest.mark.parametrize("malformed", [f"{PACKAGE}.greetings", ":app", f"{PACKAGE}.greetings:"])
def test_reference_without_module_and_attribute_is_refused(malformed: str) -> None:
    with pytest.raises(AppError) as caught:
        load_app(malformed)

    assert str(caught.value) == (
        f"app {malformed!r} is not module:attribute (e.g. reports.app:app)"
    )


@pytest.mark.parametrize(
    ("reference", "cause"),
    [
        (ref("raises_at_import"), "RuntimeError: the CRM_URL variable is not set"),
        (ref("absent"), f"ModuleNotFoundError: No module named '{PACKAGE}.absent'"),
        ("no.such.module:app", "ModuleNotFoundError: No module named 'no'"),
    ],
)
def test_module_that_does_not_import_is_one_line_naming_the_cause(
    reference: str, cause: str
) -> None:
    with pytest.raises(AppError) as caught:
        load_app(reference)

    assert str(caught.value) == f"app {reference!r} does not import: {cause}"


def test_import_error_spanning_lines_still_makes_a_one_line_message() -> None:
    reference = ref("import_fails_with_many_lines")

    with pytest.raises(AppError) as caught:
        load_app(reference)

    message = str(caught.value)
    assert message.startswith(f"app {reference!r} does not import: ValidationError: ")
    assert "\n" not in message


def test_missing_attribute_is_named() -> None:
    reference = f"{PACKAGE}.greetings:application"

    with pytest.raises(AppError) as caught:
        load_app(reference)

    assert str(caught.value) == (
        f"app {reference!r}: module '{PACKAGE}.greetings' has no attribute 'application'"
    )


def test_attribute_that_is_not_an_app_is_refused_with_its_type() -> None:
    reference = ref("not_an_app")

    with pytest.raises(AppError) as caught:
        load_app(reference)

    assert str(caught.value) == f"app {reference!r} is a dict, not a waitstate.App"


def test_load_apps_reports_a_load_app_error() -> None:
    assert load_error([GREETINGS, "no.such.module:app"]) == (
        "app 'no.such.module:app' does not import: ModuleNotFoundError: No module named 'no'"
    )


# load_apps: what apps provide together


def test_two_apps_merge_their_agents_tools_providers_and_scripts() -> None:
    apps = load_apps([GREETINGS, WEATHER])

    assert apps.refs == [GREETINGS, WEATHER]
    assert apps.agents == {
        "greeter": greetings.app.agents[0],
        "forecaster": weather.app.agents[0],
    }
    # `greet` is listed by the app and by its agent: one tool.
    assert [spec.name for spec in apps.tools] == ["greet", "farewell", "forecast", "fetch_radar"]
    assert apps.tools[0] is greetings.greet
    assert apps.tool_names() == sorted(
        ["greet", "farewell", "forecast", "fetch_radar", *WORKER_TOOLS]
    )
    assert apps.providers == {"local": greetings.local_provider}
    assert apps.scripts == {"hello": greetings.hello}


def test_agents_may_name_tools_and_providers_of_an_app_loaded_after_them() -> None:
    apps = load_apps([WEATHER, GREETINGS])

    assert sorted(apps.agents) == ["forecaster", "greeter"]
    assert apps.agent("forecaster").tool_names() == [
        "forecast",
        "fetch_radar",
        "greet",
        "wait_for_operations",
    ]


def test_app_scripts_and_providers_are_counted_with_the_built_in_ones() -> None:
    apps = load_apps([GREETINGS])

    assert apps.provider_names() == ["anthropic", "local", "openai", "openai-responses", "scripted"]
    assert apps.script_names() == sorted([*SCRIPTS, "hello"])
    apps.check_model("scripted:hello")
    apps.check_model("local:any-model")


def test_agent_naming_a_tool_of_an_app_not_loaded_is_refused() -> None:
    known = ", ".join(sorted(["forecast", "fetch_radar", *WORKER_TOOLS]))

    assert load_error([WEATHER]) == f"agent 'forecaster': unknown tools: greet; known: {known}"


def test_tool_deps_map_each_tool_to_its_apps_deps_made_once() -> None:
    made_before = len(greetings.MADE)
    tools_calls_before = len(weather.TOOLS_CALLED_WITH)

    apps = load_apps([GREETINGS, WEATHER])

    assert len(greetings.MADE) == made_before + 1
    greeter = greetings.MADE[-1]
    assert apps.tool_deps == {
        "greet": greeter,
        "farewell": greeter,
        "forecast": None,
        "fetch_radar": None,
    }
    # An app without deps gets None in its tools function, called once.
    assert weather.TOOLS_CALLED_WITH[tools_calls_before:] == [None]


async def test_tool_handlers_get_their_apps_deps_through_the_run_context() -> None:
    apps = load_apps([GREETINGS])
    registry = ToolRegistry(apps.tools)

    def context(tool: str) -> RunContext[object]:
        return RunContext("run-1", "call_1", "run-1/1", deps=apps.tool_deps[tool])

    greeted = await registry.run(
        ToolCall(id="call_1", name="greet", arguments=json.dumps({"person": "Ada"})),
        context("greet"),
    )
    parted = await registry.run(
        ToolCall(id="call_2", name="farewell", arguments=json.dumps({"person": "Ada"})),
        context("farewell"),
    )

    assert (greeted.content, greeted.is_error) == ("Hello, Ada!", False)
    assert (parted.content, parted.is_error) == ("Goodbye, Ada (after 1 greetings).", False)
    assert apps.tool_deps["greet"].greeted == ["Ada"]


async def test_aclose_awaits_the_deps_async_aclose_once() -> None:
    apps = load_apps([GREETINGS, WEATHER])
    greeter = apps.tool_deps["greet"]
    assert greeter.closed == 0

    await apps.aclose()
    await apps.aclose()

    assert greeter.closed == 1


# load_apps: tools the model could not tell apart


def test_tool_without_a_description_is_refused() -> None:
    # @tool refuses it when the module is imported; a ToolSpec's is checked on load.
    assert load_error([ref("undescribed")]) == (
        f"app {ref('undescribed')!r} does not import: TypeError: tool "
        f"{PACKAGE}.undescribed.ping has no description, and the model would see only its "
        "name: give the function a docstring that says what it does, or @tool(description=...)"
    )
    assert load_error([ref("undescribed_spec")]) == (
        f"app {ref('undescribed_spec')!r}: tool 'ping' has no description, and the model would "
        "see only its name: say what it does (ToolSpec(description=...), or a docstring)"
    )


# load_apps: names taken twice


def test_tool_name_used_by_two_apps_is_refused() -> None:
    assert load_error([GREETINGS, ref("greet_again")]) == (
        f"app {ref('greet_again')!r}: tool 'greet' is already declared by app {GREETINGS}"
    )


def test_tool_name_used_twice_in_one_app_is_refused() -> None:
    assert load_error([ref("tool_twice")]) == (
        f"app {ref('tool_twice')!r}: tool 'lookup' is already declared by this app"
    )


@pytest.mark.parametrize(
    ("module", "name"),
    [("shadows_request_approval", "request_approval"), ("shadows_read_ref", "read_ref")],
)
def test_tool_named_like_a_worker_built_in_is_refused(module: str, name: str) -> None:
    assert load_error([ref(module)]) == (
        f"app {ref(module)!r}: tool {name!r} is already declared by the worker's built-ins"
    )


def test_agent_declared_twice_in_one_app_is_refused() -> None:
    assert load_error([ref("agent_twice")]) == (
        f"app {ref('agent_twice')!r}: agent 'twin' is declared twice"
    )


def test_agent_declared_by_two_apps_is_refused() -> None:
    assert load_error([GREETINGS, ref("greeter_again")]) == (
        f"app {ref('greeter_again')!r}: agent 'greeter' is declared twice"
    )


# load_apps: agents that no app can serve


def test_agent_listing_an_unknown_tool_is_refused_naming_the_known_tools() -> None:
    known = ", ".join(sorted(["send_email", *WORKER_TOOLS]))

    assert load_error([ref("unknown_tool")]) == (
        f"agent 'secretary': unknown tools: send_fax; known: {known}"
    )


def test_agent_listing_a_function_that_is_not_a_tool_is_refused() -> None:
    assert "word_count" in load_error([ref("undecorated_agent_tool")])


def test_agent_with_an_unknown_provider_is_refused() -> None:
    assert load_error([ref("unknown_provider")]) == (
        "agent 'oracle': model 'delphi:pythia-1': unknown provider 'delphi'; "
        "known: anthropic, openai, openai-responses, scripted"
    )


def test_agent_with_an_unknown_script_is_refused_naming_the_scripts() -> None:
    message = load_error([ref("unknown_script")])

    assert message == (
        "agent 'actor': model 'scripted:no-such-play': no script named 'no-such-play'; "
        f"scripts: {', '.join(sorted(SCRIPTS))}"
    )


def test_agent_whose_budget_degrades_to_an_unknown_or_unpriced_model_is_refused() -> None:
    module = "tests.waitstate.apps_for_tests.unknown_degrade_model"

    assert load_error([f"{module}:unknown"]) == (
        "agent 'saver': its budget's degrade_to: model 'delphi:pythia-1': unknown provider "
        "'delphi'; known: anthropic, openai, openai-responses, scripted"
    )
    assert load_error([f"{module}:unpriced"]) == (
        "agent 'spender': its budget's degrade_to 'scripted:echo' has no price in the budget's "
        "table, and a dollar budget calls no model it cannot price"
    )


def test_agent_output_type_that_is_not_a_pydantic_model_is_refused() -> None:
    assert load_error([ref("output_not_a_model")]) == (
        "agent 'reporter': output_type must be a pydantic model class"
    )


# load_apps: long tools completed by callback


def test_callback_tool_is_refused_when_callbacks_are_not_configured() -> None:
    assert load_error([CALLBACK_EXPORT], callbacks_configured=False) == (
        f"tool 'start_export' (app {CALLBACK_EXPORT}) completes by callback: "
        "the worker needs WAITSTATE_TOKEN_KEYS and GATEWAY_URL"
    )


def test_callback_tool_is_accepted_when_callbacks_are_configured() -> None:
    apps = load_apps([CALLBACK_EXPORT], callbacks_configured=True)

    [spec] = apps.tools
    assert (spec.name, spec.kind) == ("start_export", "long")
    assert spec.long is not None and spec.long.completion == "callback"
    assert sorted(apps.agents) == ["exporter"]


def test_poll_tool_needs_no_callbacks() -> None:
    apps = load_apps([GREETINGS, WEATHER], callbacks_configured=False)

    radar = next(spec for spec in apps.tools if spec.name == "fetch_radar")
    assert radar.long is not None and radar.long.completion == "poll"


# Apps.agent


def test_agent_by_name_returns_it() -> None:
    apps = load_apps([GREETINGS])

    assert apps.agent("greeter") is greetings.app.agents[0]
    assert apps.agent("greeter").model == "scripted:hello"


def test_unknown_agent_is_refused_naming_the_known_ones() -> None:
    apps = load_apps([GREETINGS, WEATHER])

    with pytest.raises(AppError) as caught:
        apps.agent("nobody")

    assert str(caught.value) == "unknown agent 'nobody'; known: forecaster, greeter"


def test_unknown_agent_without_apps_says_none_is_loaded() -> None:
    with pytest.raises(AppError) as caught:
        Apps().agent("greeter")

    assert str(caught.value) == "unknown agent 'greeter'; known: none (no app is loaded)"
