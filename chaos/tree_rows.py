"""The tree rows (chaos.trees): each tree's outcome against its class's invariants
(chaos.tree_checks), and what each row says it did."""

from __future__ import annotations

from collections import Counter
from typing import Any

from chaos import tree_checks as checks
from chaos.model import Check
from chaos.runs import RunOutcome
from chaos.tree_app import TREE_BUDGET_TOKENS
from chaos.tree_checks import Tree

ROW_KILLS = "21 worker SIGKILL mid-tree (children running, waiting, just finished)"
ROW_RESTART = "22 dev server SIGKILL+SIGTERM restart mid-tree"
ROW_CANCEL = "23 tree cancelled mid-flight (3 levels), its worker SIGKILLed around the cancel"
# workflows/tree.py's promise that a cancelled run waits for its children's cancels: its own row,
# so that the invariants (row 23) are read apart from it.
ROW_WAITS = "23b a cancelled node closes once its children have (as workflows/tree.py says)"
ROW_BUDGET = "24 tree budget: workers SIGKILLed while its nodes reserve and spend"
ROWS = (ROW_KILLS, ROW_RESTART, ROW_CANCEL, ROW_WAITS, ROW_BUDGET)
# The moments of a tree its workers are killed at, in order.
MOMENTS = ("running", "waiting", "finished")
# How long a tree's nodes may take to close once its root has ended.
CLOSE_TIMEOUT = 90.0


def rows(
    outcomes: list[RunOutcome], stats: dict[str, Any], kills: list[dict[str, Any]]
) -> list[Check]:
    """The rows: each tree against its class's invariants (chaos.tree_checks)."""
    found = []
    for name in (ROW_KILLS, ROW_RESTART, ROW_CANCEL, ROW_BUDGET):
        mine = [o for o in outcomes if o.plan.klass == name]
        if not mine:
            continue
        check = Check(name, attempts=len(mine))
        trees = [o.facts.get("tree") for o in mine]
        for outcome, tree in zip(mine, trees, strict=True):
            check.violations += violations(outcome, tree, stats)
        roots = {o.plan.id for o in mine}
        theirs = [k for k in kills if k["tree"] in roots]
        check.outcome = _said(name, mine, [t for t in trees if t is not None], stats, theirs)
        found.append(check)
    cancelled = [t for o in outcomes if o.plan.klass == ROW_CANCEL and (t := o.facts.get("tree"))]
    if cancelled:
        waits = Check(ROW_WAITS, attempts=len(cancelled))
        for tree in cancelled:
            waits.violations += checks.waited_for_children(tree)
        parents = {parent for t in cancelled for parent, _, _ in checks.child_ends(t)}
        waits.outcome = (
            f"{len(cancelled)} trees, {len(parents)} parents: "
            f"{len(waits.violations)} closed before a child had"
        )
        found.append(waits)
    return found


def violations(outcome: RunOutcome, tree: Tree | None, stats: dict[str, Any]) -> list[str]:
    """What the run's tree broke of its class's invariants."""
    plan = outcome.plan
    if tree is None:
        return [f"{plan.id}: its tree was never read"]
    cancel = plan.klass == ROW_CANCEL
    budget = plan.klass == ROW_BUDGET
    wanted = "cancelled" if cancel else "budget_exceeded" if budget else "completed"
    found = [] if outcome.status == wanted else [f"{plan.id}: ended {outcome.status}"]
    found += tree.unread + checks.started_once(tree) + checks.closed(tree)
    found += checks.delivered_once(tree, completes=not (cancel or budget))
    if budget:
        counted = (
            outcome.state.budget.spent_tokens if outcome.state and outcome.state.budget else None
        )
        found += checks.budget_kept(tree, TREE_BUDGET_TOKENS, counted)[1]
    running = outcome.facts.get("cancel", {}).get("jobs", [])
    found += checks.jobs_once(tree, stats.get("keys", {}), stats.get("jobs", {}), set(running))
    if cancel and not running:
        found.append(f"{plan.id}: no job of the tree ran when it was cancelled")
    if tree.closing is None:
        found.append(f"{plan.id}: nodes still open {CLOSE_TIMEOUT:.0f} s after the root ended")
    if cancel:
        found += checks.model_calls_after_cancel(tree)[1]
    return found


def _moment(moment: str, kills: list[dict[str, Any]]) -> str:
    """`2 finished (children ended 1-3 of 4 started; 0.1 s at most after an asker's end)`."""
    if not kills:
        return f"0 {moment}"
    ended = [k["ended"] for k in kills]
    started = max(k["started"] for k in kills)
    late = [k["late"] for k in kills if k["late"] is not None]
    after = f"; {max(late):.1f} s at most after an asker's end" if late else ""
    return (
        f"{len(kills)} {moment} (children ended {min(ended)}-{max(ended)} of {started} "
        f"started{after})"
    )


def _said(
    name: str,
    mine: list[RunOutcome],
    trees: list[Tree],
    stats: dict[str, Any],
    kills: list[dict[str, Any]],
) -> str:
    nodes = sum(len(t.nodes) for t in trees)
    keys = {k: v for t in trees for k, v in checks.tree_keys(t, stats.get("keys", {})).items()}
    ended = Counter(o.status for o in mine)
    closing = [t.closing for t in trees if t.closing is not None]
    what = f"{len(mine)} trees, {nodes} nodes, {len(keys)} jobs"
    if name == ROW_KILLS:
        what += f"; {len(kills)} kills ({sum(k['workers'] for k in kills)} workers): "
        what += ", ".join(_moment(m, [k for k in kills if k["moment"] == m]) for m in MOMENTS)
    if name == ROW_CANCEL:
        after = sum(checks.model_calls_after_cancel(t)[0] for t in trees)
        cancels = sum(v["cancels"] for v in keys.values())
        running = sum(len(o.facts.get("cancel", {}).get("jobs", [])) for o in mine)
        what += (
            f"; jobs running at the cancel {running}, cancels sent {cancels}; model calls "
            f"started after the root's cancel (each before its own node's): {after}"
        )
        if closing:
            what += f"; every node closed {max(closing):.1f} s after the root at most"
    if name == ROW_BUDGET:
        spent = [checks.budget_kept(t, TREE_BUDGET_TOKENS, None)[0] for t in trees]
        what += (
            f"; {len(kills)} kills ({sum(k['workers'] for k in kills)} workers) while spending"
            f"; spent past the budget of {TREE_BUDGET_TOKENS:,} tokens (past, bound): "
            + ", ".join(f"{past:,}≤{bound:,}" for past, bound in spent)
        )
    statuses = ", ".join(f"{n} {status}" for status, n in sorted(ended.items()))
    return f"{what}; {statuses}"
