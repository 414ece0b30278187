"""`waitstate fork` and `waitstate eval` against the dev server with the shop of
tests/workflows/fork_app.py (run in this process, as the CLI's entry point runs them), and the
report's files (`waitstate.evals`): Markdown whose runs' text cannot break its layout, JSON a
CI step reads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually
from tests.workflows.fork_app import serving
from tests.workflows.test_forks import WITHIN, _ran
from waitstate.cli.main import _parser, exit_code
from waitstate.client import ClientError, StartFailed, WaitstateClient
from waitstate.evals import report_json, report_markdown
from waitstate.schemas import RunInput, Usage
from waitstate.schemas.evals import EvalInput, EvalReport, EvalRow, FieldChange, Score
from waitstate.settings import Settings

HOSTILE = "ok | done\n# not a heading\n<script>alert(1)</script>\n```\n| x | y |"


def _settings(env: WorkflowEnvironment, task_queue: str) -> Settings:
    return Settings(
        temporal_address=env.client.service_client.config.target_host,
        task_queue=task_queue,
        gateway_url="http://gateway.test",
    )


async def _cli(settings: Settings, *argv: str) -> int:
    """The command `argv` names, run as `waitstate` runs it (its exit status)."""
    args = _parser().parse_args(list(argv))
    code: int = await asyncio.wait_for(args.command(args, settings, None), WITHIN)
    return code


async def test_fork_prints_the_forks_id_and_with_wait_its_outcome(
    dev_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = _settings(dev_env, task_queue)
    async with serving(dev_env, task_queue) as client:
        origin, recorded = await _ran(client, RunInput(task="serve customer=ann", agent="shop"))
        capsys.readouterr()

        started = await _cli(settings, "fork", origin, "--at", "turn:1", "--id", "fork-ann-1")
        said = capsys.readouterr().out
        waited = await _cli(settings, "fork", origin, "--at", "2", "--wait", "--json")
        outcome = json.loads(capsys.readouterr().out)
        changed = await _cli(
            settings, "fork", origin, "--at", "turn:0", "--model", "scripted:shop-more", "--wait"
        )
        changed_said = capsys.readouterr().out
        with pytest.raises(StartFailed) as beyond:
            await _cli(settings, "fork", origin, "--at", "turn:3")
        state = (await client.status("fork-ann-1")).state

    assert started == 0 and said.startswith(f"fork fork-ann-1 of {origin} at turn 1\n")
    assert state.fork is not None and (state.fork.origin, state.fork.at) == (origin, 1)
    assert waited == 0 and outcome["origin"] == origin and outcome["at"] == 2
    assert outcome["status"] == "completed"
    assert outcome["final_output"] == recorded.final_output
    assert changed == 0 and "completed after" in changed_said
    assert f"answer: {recorded.final_output}" not in changed_said  # another model, another answer
    # Turn 3 of a run of three turns: the client's refusal, exit 1 (one line, in main).
    assert "from turn 0 to 2" in str(beyond.value) and exit_code(beyond.value) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["fork", "run-1", "--at", "turn:x"],
        ["fork", "run-1", "--at", "turn:-1"],
        ["fork", "run-1", "--at", "step:1"],
        ["fork", "run-1"],
        ["fork", "run-1", "--at", "0", "--instructions", "x", "--agent", "shop"],
        ["eval", "--runs", "a", "--at", "turn:x"],
        ["eval", "--runs", "a", "--query", "x"],
        ["eval", "--model", "scripted:shop"],
        ["eval", "--runs", "a", "--limit", "501"],
        ["eval", "--runs", "a", "--threshold", "1.5"],
        ["eval", "--runs", "a", "--concurrency", "0"],
        ["eval", "--runs", "a", "--price", "gpt-4.1=2/8"],
        ["eval", "--runs", "a", "--price", "openai:gpt-4.1=2"],
        ["eval", "--runs", "a", "--price", "openai:gpt-4.1=-1/8"],
        ["eval", "--runs", "a", "--policy", "live"],
    ],
)
def test_a_malformed_command_is_a_one_line_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(argv)
    error = capsys.readouterr().err
    assert exited.value.code == 2
    assert error.startswith("error: ") and error.count("\n") == 1, error
    assert f"{argv[0]} --help" in error


def test_a_price_and_a_turn_are_read_as_said() -> None:
    args = _parser().parse_args(
        [
            "eval",
            "--runs",
            "a,b",
            "--runs",
            "c,a",
            "--at",
            "turn:2",
            "--price",
            "openai:gpt-4.1=2/8",
        ]
    )
    assert args.at == 2 and args.runs == ["a,b", "c,a"]
    [(spec, price)] = args.price
    assert spec == "openai:gpt-4.1" and (price.input, price.output) == (2, 8)
    assert args.threshold == 0.9 and args.concurrency == 8 and args.limit == 50


async def test_eval_writes_the_report_and_exits_by_the_verdict(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = _settings(dev_env, task_queue)
    async with serving(dev_env, task_queue) as client:
        runs = [
            (await _ran(client, RunInput(task=f"serve customer=e{n}", agent="shop")))[0]
            for n in range(3)
        ]
        capsys.readouterr()
        same = await _cli(
            settings,
            "eval",
            "--runs",
            ",".join(runs),
            "--price",
            "scripted:shop=1/2",
            "--out",
            str(tmp_path),
            "--id",
            "eval-same",
        )
        same_out = capsys.readouterr()
        changed = await _cli(
            settings,
            "eval",
            "--runs",
            runs[0],
            "--runs",
            f"{runs[1]},{runs[2]}",
            "--model",
            "scripted:shop-more",
            "--out",
            str(tmp_path),
            "--id",
            "eval-more",
            "--json",
        )
        summary = json.loads(capsys.readouterr().out)

    assert same == 0
    assert "3 of 3 runs passed (100%), threshold 90%: holds" in same_out.out
    assert "page: http://gateway.test/pages/inbox/evals/eval-same" in same_out.out
    for run in runs:  # each run said on stderr as it is scored
        assert f"/3 {run}: pass" in same_out.err
    markdown = (tmp_path / "eval-same.md").read_text()
    data = json.loads((tmp_path / "eval-same.json").read_text())
    assert data["holds"] is True and data["pass_rate"] == 1.0 and data["passed"] == 3
    assert [row["run_id"] for row in data["rows"]] == runs
    assert all(row["same_tools"] for row in data["rows"])
    assert data["input"]["prices"]["scripted:shop"] == {
        "input": 1.0,
        "output": 2.0,
        "cached_input": None,
        "cache_write": None,
    }
    assert "- verdict: **holds**" in markdown
    for run, row in zip(runs, data["rows"], strict=True):
        assert f"| {run} | completed → completed | pass | yes |" in markdown
        assert row["new_answer"] in markdown and row["new_cost"] is not None

    # Another model charges 20: the app's scorer fails every fork, and the command exits 1.
    assert changed == 1
    assert summary["eval_id"] == "eval-more" and summary["holds"] is False
    assert (summary["passed"], summary["runs"], summary["threshold"]) == (0, 3, 0.9)
    assert summary["markdown"] == str(tmp_path / "eval-more.md")
    markdown = (tmp_path / "eval-more.md").read_text()
    data = json.loads((tmp_path / "eval-more.json").read_text())
    assert data["holds"] is False and data["pass_rate"] == 0.0
    assert "- changed: model scripted:shop-more" in markdown
    assert "- verdict: **does not hold**" in markdown
    assert markdown.count("- charged\\_ten: fail") == 3
    for row in data["rows"]:
        assert [(s["name"], s["passed"]) for s in row["scores"]] == [("charged_ten", False)]
        assert f"## {row['run_id']}: FAIL" in markdown


async def test_eval_takes_the_newest_completed_runs_a_query_lists_never_a_fork(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    settings = _settings(dev_env, task_queue)
    query = f"TaskQueue = '{task_queue}'"
    async with serving(dev_env, task_queue) as client:
        runs = [
            (await _ran(client, RunInput(task=f"serve customer=q{n}", agent="shop")))[0]
            for n in range(3)
        ]
        fork_id, _ = await client.fork(runs[2])
        await asyncio.wait_for(client.handle(fork_id).result(), WITHIN)

        async def listed() -> list[str] | None:
            found = await client.runs_to_evaluate(query, 2)
            return found if found == [runs[2], runs[1]] else None

        assert await eventually(listed, "the newest two runs, the fork left out") == runs[:0:-1]
        assert set(await client.runs_to_evaluate(query, 10)) == set(runs)
        code = await _cli(
            settings, "eval", "--query", query, "--limit", "2", "--out", str(tmp_path), "--id", "q"
        )
    data = json.loads((tmp_path / "q.json").read_text())
    assert code == 0 and data["input"]["runs"] == [runs[2], runs[1]]
    assert data["input"]["query"] == query


async def test_a_query_temporal_refuses_is_said(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    client = WaitstateClient(dev_env.client, task_queue=task_queue)
    with pytest.raises(ClientError) as refused:
        await client.runs_to_evaluate("NoSuchAttribute = 'x'", 5)
    assert str(refused.value).startswith("the query is refused")


# --- the report's files


def _report(*, passed: bool = False) -> EvalReport:
    hostile = EvalRow(
        run_id="run|1",
        fork_id="fork-1",
        task=f"serve {HOSTILE}",
        original_status="completed",
        new_status="completed",
        original_answer=HOSTILE,
        new_answer="````\nescaped?\n````",
        fields=[FieldChange(field="amount|x", original={"a": "<b>|"}, new=None)],
        original_tools=["lookup", "charge|<i>"],
        new_tools=["lookup"],
        original_usage=Usage(input_tokens=1000, output_tokens=234),
        new_usage=Usage(input_tokens=10, output_tokens=2),
        original_cost=0.5,
        scores=[Score(name="judge", passed=False, detail="said | no\n<script>x</script>")],
        passed=passed,
    )
    failed = EvalRow(run_id="run-2", fork_id="fork-2", task="t", error="could not\nfork | it")
    return EvalReport(
        eval_id="eval-1",
        input=EvalInput(
            runs=["run|1", "run-2", "run-3"],
            at=1,
            instructions="Be terse.\nVery terse.",
            threshold=0.5,
            query="AgentName = 'shop'",
        ),
        rows=[hostile, failed],
        done=True,
    )


def test_the_markdown_escapes_every_runs_text_out_of_its_layout() -> None:
    markdown = report_markdown(_report())
    header, runs_table = markdown.split("## Runs", 1)

    assert header.splitlines() == [
        "# Evaluation eval-1",
        "",
        "- changed: instructions Be terse. ...",
        "- forked at turn 1, tool calls answered: recorded",
        "- runs: 3 (listed by the query AgentName = 'shop')",
        "- scorers: all of the app's",
        "- pass rate: 0 of 2 (0%), threshold 50%",
        "- verdict: **does not hold**",
        "",
    ]
    assert "| run\\|1 | completed → completed | FAIL | no | 1,234 → 12 | $0.5000 → - |" in markdown
    assert '| amount\\|x | {"a": "\\<b\\>\\|"} | - |' in markdown
    # Raw HTML and headings only inside fences, whose fence no backtick run in them closes.
    outside = markdown.split("````text\n" + HOSTILE + "\n````")
    assert len(outside) == 2, markdown
    assert "`````text\n````\nescaped?\n````\n`````" in outside[1]
    for part in outside:
        assert "<script>" not in part and "\n# not" not in part
    # Outside them, every table line has its columns: no pipe but the table's own.
    tables = [line for part in outside for line in part.splitlines() if line.startswith("|")]
    assert len(tables) == 2 + 2 + 2 + 1  # runs: head, rule, 2 rows; fields: head, rule, 1 row
    for line in tables:
        assert line.replace("\\|", "").count("|") in (4, 7), line
    assert "- judge: fail: said \\| no<br>\\<script\\>x\\</script\\>" in markdown
    assert "- original: lookup → charge\\|\\<i\\>" in markdown
    assert "Error: could not<br>fork \\| it" in markdown
    assert "Task: serve ok \\| done<br>\\# not a heading<br>" in markdown


def test_the_markdown_of_a_running_evaluation_says_how_far_it_is() -> None:
    running = _report().model_copy(update={"done": False})
    assert "- verdict: **running: 2 of 3 runs scored**" in report_markdown(running)
    empty = running.model_copy(update={"rows": []})
    assert "| (none scored yet) | | | | | |" in report_markdown(empty)


def test_the_json_has_the_reports_fields_and_the_verdict_computed() -> None:
    report = _report(passed=True)
    data = json.loads(report_json(report))
    assert EvalReport.model_validate(data) == report  # the computed keys are extra
    assert (data["passed"], data["pass_rate"], data["holds"]) == (1, 0.5, True)
    assert [row["same_tools"] for row in data["rows"]] == [False, True]
    assert data["rows"][0]["original_answer"] == HOSTILE
