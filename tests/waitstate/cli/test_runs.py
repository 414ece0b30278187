"""What `run` starts a run with, from its arguments: every model spec checked before anything is
started, the cheaper model of `--degrade-to` as the run's own."""

from __future__ import annotations

import pytest

from waitstate.cli import runs
from waitstate.cli.main import _parser
from waitstate.cli.output import CliError
from waitstate.cli.runs import NO_TOOLS, _run_input
from waitstate.settings import Settings

BUDGET = ("--budget-tokens", "300", "--on-exceed", "degrade")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("nosuch:model", "unknown provider 'nosuch'"),
        ("openai:", "is not provider:model"),
        ("openai: gpt-4.1", "has spaces around"),
        ("scripted:no-such-script", "no script named 'no-such-script'"),
    ],
)
async def test_a_degrade_model_no_run_could_call_is_a_bad_argument_naming_it(
    spec: str, says: str
) -> None:
    args = _parser().parse_args(["run", "loop", *BUDGET, "--degrade-to", spec])

    with pytest.raises(CliError) as refused:
        await _run_input(args, Settings())

    assert refused.value.code == 2
    assert str(refused.value).startswith("--degrade-to: model ")
    assert repr(spec) in str(refused.value) and says in str(refused.value)


async def test_a_degrade_model_the_apps_have_goes_into_the_runs_budget() -> None:
    args = _parser().parse_args(["run", "loop", *BUDGET, "--degrade-to", "scripted:echo"])

    run_input = await _run_input(args, Settings())

    assert run_input.budget is not None
    assert (run_input.budget.on_exceed, run_input.budget.degrade_to) == ("degrade", "scripted:echo")


async def test_a_run_without_an_agent_where_no_app_imports_is_told_it_gets_no_tools(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As an installed CLI outside a checkout: the demo's app is not there to import.
    monkeypatch.setattr(runs, "DEMO_APP", "no_such_module_here:app")
    bare = _parser().parse_args(["run", "what is 2 + 2?"])
    named = _parser().parse_args(["run", "what is 2 + 2?", "--tools", "calculate"])

    bare_input = await _run_input(bare, Settings())
    told = capsys.readouterr().err
    named_input = await _run_input(named, Settings())

    assert bare_input.tools == [] and told.strip() == NO_TOOLS
    assert named_input.tools == ["calculate"] and capsys.readouterr().err == ""


async def test_a_run_without_an_agent_in_a_checkout_gets_the_demos_tools_and_no_notice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_input = await _run_input(_parser().parse_args(["run", "what is 2 + 2?"]), Settings())

    assert "calculate" in run_input.tools
    # Not those that start the research lead's researchers: a run without an agent has none.
    assert "read_payment_history" in run_input.tools
    assert [name for name in run_input.tools if name.startswith("agent_")] == []
    assert capsys.readouterr().err == ""
