"""The commands about forks and evaluations (docs/forks.md): `fork` (a recorded run gone on from
turn N with another model, prompt or agent) and `eval` (many runs forked the same way, scored
against their originals by the app's scorers, the report written as Markdown and JSON: the
exit status is the verdict, for a CI step)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from waitstate.cli.follow import follow
from waitstate.cli.output import (
    CliError,
    checked_id,
    invalid,
    one_line,
    print_json,
    print_outcome,
    run_exit_code,
)
from waitstate.cli.replay import positive
from waitstate.client import ClientError, WaitstateClient, new_eval_id, new_fork_id
from waitstate.evals import changes, report_json, report_markdown, verdict
from waitstate.schemas.budgets import ModelPrice
from waitstate.schemas.evals import MAX_EVAL_CONCURRENCY, MAX_EVAL_RUNS, EvalInput, EvalReport
from waitstate.schemas.forks import ForkPolicy
from waitstate.schemas.specs import parse_model_spec
from waitstate.settings import Settings
from waitstate.tracing import Tracing

DEFAULT_LIMIT = 50
DEFAULT_THRESHOLD = 0.9
DEFAULT_CONCURRENCY = 8
DEFAULT_OUT = Path("evals")
# How often `eval` looks at the evaluation's rows so far, to say which runs were scored.
PROGRESS_EVERY = 2.0
# The options an evaluation takes as they are given.
AS_GIVEN = ("at", "model", "instructions", "agent", "policy", "concurrency", "threshold", "query")


def add_parsers(sub: Any) -> None:
    """Add `fork` and `eval` to the CLI's commands (`sub`, its parser's subparsers)."""
    _fork_parser(sub)
    _eval_parser(sub)


def _fork_parser(sub: Any) -> None:
    fork = sub.add_parser(
        "fork",
        help="fork a recorded run: a new run that goes on from its turn N with another model, "
        "prompt or agent, its tool calls answered from the recording",
        description="Starts a run whose model is sent what the recorded run's model was before "
        "its turn N + 1, then goes on as --model, --instructions or --agent say (the run's own "
        "where none is given). Its tool calls are answered per --policy: recorded (the "
        "recording's answer; a call it lacks is refused), stub (the tool's stub where the "
        "recording lacks it), live (for real, once a person approves). Prints the fork's id; "
        "with --wait, follows it to its end and prints its outcome (exit 1 if it ended without "
        "its answer). See docs/forks.md.",
    )
    fork.add_argument("run_id", help="the recorded run to fork")
    fork.add_argument(
        "--at",
        type=turn,
        required=True,
        metavar="turn:N",
        help="the turn the fork goes on from: turn:0 is the first model call (a thread's "
        "fork: message:N, the recorded messages it answers again)",
    )
    _fork_settings(fork)
    fork.add_argument(
        "--policy",
        choices=get_args(ForkPolicy),
        default="recorded",
        help="how the fork's tool calls are answered (default: recorded)",
    )
    fork.add_argument("--id", help="the fork's id; forking again with an id that exists finds it")
    fork.add_argument("--wait", action="store_true", help="follow the fork until it ends")
    fork.add_argument("--json", action="store_true", help="print one JSON object")
    fork.set_defaults(command=cmd_fork)


def _eval_parser(sub: Any) -> None:
    evaluation = sub.add_parser(
        "eval",
        help="fork recorded runs with another model, prompt or agent, score each fork against "
        "its original: exit 1 when the pass rate is below the threshold",
        description="Forks each run (--runs, or the newest --limit completed runs --query lists "
        "that are not forks or threads) as --model, --instructions and --agent say, and has each "
        "fork scored beside its original by the app's scorers (--scorer: only those). With none "
        "of the three, each run is forked as it was: a determinism check. Waits for every run "
        "(saying each on stderr as it is scored), writes the report to DIR/<eval id>.md and "
        ".json, and prints the pass rate, the verdict, the files and the gateway's page of the "
        "evaluation. Exit 0 when the pass rate reaches --threshold, 1 when it does not, 2 for a "
        "usage error. See docs/forks.md.",
    )
    which = evaluation.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--query",
        help="a visibility filter, e.g. \"AgentName = 'shop'\" (ANDed with: agent runs that "
        "completed, not forks, not threads)",
    )
    which.add_argument(
        "--runs",
        action="append",
        metavar="ID[,ID...]",
        help="the runs to evaluate, by id (repeatable)",
    )
    evaluation.add_argument(
        "--limit",
        type=limit,
        default=DEFAULT_LIMIT,
        help=f"with --query: the newest this many runs (default: {DEFAULT_LIMIT}, at most 500)",
    )
    evaluation.add_argument(
        "--at",
        type=turn,
        default=0,
        metavar="turn:N",
        help="the turn each fork goes on from (default: turn:0)",
    )
    _fork_settings(evaluation)
    evaluation.add_argument(
        "--policy",
        choices=["recorded", "stub"],
        default="recorded",
        help="how the forks' tool calls are answered: recorded (a call the recording lacks is "
        "refused) or stub (default: recorded; an evaluation runs unattended, so never live)",
    )
    evaluation.add_argument(
        "--threshold",
        type=threshold,
        default=DEFAULT_THRESHOLD,
        help=f"the pass rate to reach, 0 to 1 (default: {DEFAULT_THRESHOLD})",
    )
    evaluation.add_argument(
        "--concurrency",
        type=concurrency,
        default=DEFAULT_CONCURRENCY,
        help=f"forks running at once (default: {DEFAULT_CONCURRENCY}, at most 64)",
    )
    evaluation.add_argument(
        "--scorer",
        action="append",
        metavar="NAME",
        help="an app's scorer to use (repeatable; default: every scorer of the app)",
    )
    evaluation.add_argument(
        "--price",
        action="append",
        type=price,
        default=[],
        metavar="SPEC=IN/OUT",
        help="a model's price in dollars per million input/output tokens, to tell the runs' "
        "costs, e.g. openai:gpt-4.1=2/8 (repeatable)",
    )
    evaluation.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help="where the report's files go (default: ./evals)",
    )
    evaluation.add_argument("--id", help="the evaluation's id (it names the report's files)")
    evaluation.add_argument("--json", action="store_true", help="print one JSON object")
    evaluation.set_defaults(command=cmd_eval)


def _fork_settings(parser: argparse.ArgumentParser) -> None:
    """The flags that say how a fork differs from the run it forks."""
    parser.add_argument("--model", metavar="SPEC", help="provider:model the fork goes on with")
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument(
        "--instructions", metavar="TEXT", help="the fork's system prompt, in place of the run's"
    )
    prompt.add_argument("--agent", metavar="NAME", help="the agent the fork goes on as")


async def cmd_fork(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Fork a run at a turn, then optionally follow the fork to its end."""
    fork_id = checked_id(args.id, "--id", new_fork_id, "a fork")
    client = await WaitstateClient.connect(settings, tracing=tracing)
    fork_id, _ = await client.fork(
        args.run_id,
        at=args.at,
        model=args.model,
        instructions=args.instructions,
        agent=args.agent,
        policy=args.policy,
        fork_id=fork_id,
    )
    url = settings.run_url(fork_id)
    if not args.wait:
        if args.json:
            print_json({"fork_id": fork_id, "origin": args.run_id, "at": args.at, "url": url})
        else:
            print(f"fork {fork_id} of {one_line(args.run_id)} at turn {args.at}\nweb ui: {url}")
        return 0
    if not args.json:
        print(f"fork {fork_id} of {one_line(args.run_id)} at turn {args.at}\nweb ui: {url}")
    state = await follow(client, fork_id, quiet=args.json)
    if args.json:
        print_json(
            {
                "fork_id": fork_id,
                "origin": args.run_id,
                "at": args.at,
                **state.model_dump(mode="json", exclude={"steps"}),
            }
        )
    else:
        print_outcome(state)
    return run_exit_code(state.status)


async def cmd_eval(
    args: argparse.Namespace, settings: Settings, tracing: Tracing | None = None
) -> int:
    """Evaluate runs forked as the flags say, wait for the report, write it: 0 when the pass
    rate reaches the threshold, 1 when it does not."""
    eval_id = checked_id(args.id, "--id", new_eval_id, "an evaluation")
    if eval_id.startswith(".") or "/" in eval_id or "\\" in eval_id:
        raise CliError(f"--id {eval_id!r} names the report's files: no slash, no leading dot", 2)
    client = await WaitstateClient.connect(settings, tracing=tracing)
    runs = _listed_runs(args.runs) if args.runs else []
    if args.query is not None:
        if not args.query.strip():
            raise CliError("--query is empty: give a visibility filter, or --runs", 2)
        runs = await client.runs_to_evaluate(args.query, args.limit)
        if not runs:
            raise CliError("the query lists no completed run that is not a fork or a thread")
        if not args.json:
            print(f"evaluating the {len(runs)} newest runs the query lists", file=sys.stderr)
    try:
        given = {name: getattr(args, name) for name in AS_GIVEN}
        eval_input = EvalInput(
            runs=runs, scorers=args.scorer or None, prices=dict(args.price), **given
        )
    except ValidationError as err:
        raise invalid("evaluation", err) from None
    eval_id = await client.evaluate(eval_input, eval_id=eval_id)
    if not args.json:
        changed = ", ".join(f"{what} {value}" for what, value in changes(eval_input))
        print(
            f"evaluation {eval_id}: {len(runs)} runs forked at turn {args.at} "
            f"({one_line(changed) or 'nothing changed: a determinism check'})",
            file=sys.stderr,
        )
    report = await _report(client, eval_id, quiet=args.json)
    markdown, data = _write(report, args.out)
    # For a browser signed in to the operators' inbox (a script reads /evals/<id>.json).
    page = f"{settings.gateway_url}/pages/inbox/evals/{eval_id}" if settings.gateway_url else None
    if args.json:
        print_json(
            {
                "eval_id": eval_id,
                "runs": len(report.rows),
                "passed": report.passed,
                "pass_rate": report.pass_rate,
                "threshold": report.input.threshold,
                "holds": report.holds,
                "markdown": str(markdown),
                "json": str(data),
                "page": page,
            }
        )
    else:
        print(
            f"evaluation {eval_id}: {report.passed} of {len(report.rows)} runs passed "
            f"({report.pass_rate:.0%}), threshold {report.input.threshold:.0%}: {verdict(report)}"
        )
        print(f"report: {markdown}, {data}")
        if page is not None:
            print(f"page: {page}")
    return 0 if report.holds else 1


async def _report(client: WaitstateClient, eval_id: str, *, quiet: bool) -> EvalReport:
    """The evaluation's report once it ended; meanwhile each run scored is said on stderr."""
    ending = asyncio.create_task(client.eval_report(eval_id, wait=True))
    said = 0
    try:
        while not ending.done():
            await asyncio.wait([ending], timeout=PROGRESS_EVERY)
            if quiet or ending.done():
                continue
            try:
                so_far = await client.eval_report(eval_id)
            except ClientError:
                continue  # no worker answered just now: the wait for the end goes on
            said = _progress(so_far, said)
        report = ending.result()
    finally:
        ending.cancel()
    if not quiet:
        _progress(report, said)
    return report


def _progress(report: EvalReport, said: int) -> int:
    """Say the rows of `report` past the first `said` on stderr: how many are said now."""
    total = len(report.input.runs)
    for number, row in enumerate(report.rows[said:], start=said + 1):
        outcome = "pass" if row.passed else "FAIL"
        why = f" ({one_line(row.error)})" if row.error else ""
        print(f"  {number}/{total} {one_line(row.run_id)}: {outcome}{why}", file=sys.stderr)
    return max(said, len(report.rows))


def _write(report: EvalReport, out: Path) -> tuple[Path, Path]:
    """Write the report as `out/<eval_id>.md` and `.json`: their paths.

    Raises:
        CliError: the directory or a file cannot be written.
    """
    markdown, data = out / f"{report.eval_id}.md", out / f"{report.eval_id}.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        markdown.write_text(report_markdown(report), encoding="utf-8")
        data.write_text(report_json(report), encoding="utf-8")
    except OSError as err:
        raise CliError(f"could not write the report to {out}: {err.strerror or err}") from err
    return markdown, data


def _listed_runs(given: list[str]) -> list[str]:
    """`--runs`' ids, each flag's split at commas, blanks left out, each once, in order."""
    runs = [run.strip() for value in given for run in value.split(",")]
    return list(dict.fromkeys(run for run in runs if run))


def turn(text: str) -> int:
    """An argparse type: a turn, `turn:N` or `N` (a thread's messages, `message:N`), N 0 or
    more."""
    number = text.removeprefix("turn:").removeprefix("message:")
    if not number.isdigit() or not number.isascii():
        raise argparse.ArgumentTypeError(
            f"not turn:N or message:N (N a whole number, 0 or more): {text!r}"
        )
    return int(number)


def limit(text: str) -> int:
    """An argparse type: how many runs a query's listing gives, 1 to `MAX_EVAL_RUNS`."""
    return _within(text, MAX_EVAL_RUNS)


def concurrency(text: str) -> int:
    """An argparse type: how many forks run at once, 1 to `MAX_EVAL_CONCURRENCY`."""
    return _within(text, MAX_EVAL_CONCURRENCY)


def threshold(text: str) -> float:
    """An argparse type: a pass rate, 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be 0 to 1 (a pass rate), got {text}")
    return value


def price(text: str) -> tuple[str, ModelPrice]:
    """An argparse type: `provider:model=IN/OUT`, dollars per million input and output tokens."""
    spec, _, rates = text.rpartition("=")
    given_in, _, given_out = rates.partition("/")
    try:
        parse_model_spec(spec)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    try:
        return spec, ModelPrice(input=float(given_in), output=float(given_out))
    except ValueError:  # a rate that is not a number, or below 0
        raise argparse.ArgumentTypeError(
            f"not SPEC=IN/OUT, dollars per million tokens, 0 or more (e.g. "
            f"openai:gpt-4.1=2/8): {text!r}"
        ) from None


def _within(text: str, most: int) -> int:
    value = positive(text)
    if value > most:
        raise argparse.ArgumentTypeError(f"must be 1 to {most}, got {value}")
    return value
