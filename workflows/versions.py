"""The patch markers of the agent run: the home of the changes after 1.0.

1.0 is the baseline: one behaviour, with no marker (the seven markers of the runs before it,
`exactly-once-v2` and `agent-run-3` to `agent-run-8`, were folded into it, their newest
behaviour kept; docs/versions.md). A change of behaviour that live runs may replay goes
behind `workflow.patched(...)` with an id declared here and listed in `MARKERS`: runs
recorded before it keep the baseline, so their histories replay; runs started after it get
the new behaviour. Each marker costs a run's history an event and a search-attribute upsert,
so it is read once, when the run's workflow object is built.

A change that saves a run's history an event cannot pay for a marker: it goes by the run's
input instead (`RunInput.revision`, recorded with the start, so free in history). Every start
records the newest revision; an input recorded before revisions has none and replays as 0.
"""

from __future__ import annotations

# Every marker the agent run checks for, oldest first (none since the 1.0 baseline), which
# `waitstate versions` counts open runs by and docs/versions.md tells the story of.
MARKERS: tuple[str, ...] = ()

# The revisions carried in the input, by what each brought (docs/versions.md, "Revisions").
# A run that completes upserts no `AgentStatus` as it ends: Temporal's ExecutionStatus says it.
# The newest is `waitstate.schemas.run.REVISION`, the default of every start.
COMPLETED_UNMARKED = 1
