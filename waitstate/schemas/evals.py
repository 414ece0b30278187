"""An evaluation: recorded runs forked with another model, prompt or agent, each fork's answer set
beside its original's, scored by the app's scorers, and a report (docs/forks.md).

An evaluation is a workflow (`EvalWorkflow`): it forks each run (at most `concurrency` at once),
waits for the forks, and has each scored where the app's code runs (the worker's `score_fork`
activity). Its report is its result, and its progress its `report` query: the CLI writes it as
Markdown and JSON, the gateway shows it as a page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field, field_validator

from waitstate.schemas.budgets import ModelPrice
from waitstate.schemas.forks import ForkPolicy, ForkRequest
from waitstate.schemas.messages import Usage
from waitstate.schemas.specs import parse_model_spec

PREPARE_FORK = "prepare_fork"
SCORE_FORK = "score_fork"
# Runs one evaluation forks at most: its report is its result, recorded in its history.
MAX_EVAL_RUNS = 500
MAX_EVAL_CONCURRENCY = 64
# What a report keeps of a task and of an answer (the runs themselves keep all of them).
TASK_CHARS = 200
ANSWER_CHARS = 2000
# The scorer an evaluation uses when its app declares none.
SAME_OUTCOME = "same_outcome"


class EvalCase(BaseModel):
    """What a scorer is given: one recorded run and its fork, side by side."""

    run_id: str
    fork_id: str
    task: str
    agent: str | None = None
    original_answer: str | None
    new_answer: str | None
    original_status: str
    new_status: str
    original_output: Any = Field(
        default=None, description="The original answer as JSON, if it is (structured output)."
    )
    new_output: Any = Field(default=None, description="The fork's answer as JSON, if it is.")
    original_tools: list[str] = Field(description="The tool calls after the fork's turn, by name.")
    new_tools: list[str] = Field(description="The fork's tool calls, by name.")


class Score(BaseModel):
    """What one scorer said of one fork."""

    name: str
    passed: bool
    detail: str = ""


# A scorer: a function of the case, saying pass or fail (True/False, or a `Score`, or
# `(passed, detail)`). Declared by the app: `App(scorers={"name": scorer})`.
Scorer = Callable[[EvalCase], "bool | Score | tuple[bool, str]"]


class FieldChange(BaseModel):
    """A field of a structured answer that the fork changed (None: absent on that side)."""

    field: str
    original: Any = None
    new: Any = None


class EvalRow(BaseModel):
    """One run of an evaluation: its original and its fork, compared and scored."""

    run_id: str
    fork_id: str
    task: str = Field(description="Its start, to 200 characters.")
    original_status: str = ""
    new_status: str = ""
    original_answer: str | None = None
    new_answer: str | None = None
    fields: list[FieldChange] | None = Field(
        default=None,
        description="Both answers JSON objects: the fields that differ (empty: none); "
        "None where either answer is not one.",
    )
    original_tools: list[str] = Field(default_factory=list)
    new_tools: list[str] = Field(default_factory=list)
    original_usage: Usage = Field(default_factory=Usage)
    new_usage: Usage = Field(default_factory=Usage)
    original_cost: float | None = Field(
        default=None, description="Dollars, if its model is priced."
    )
    new_cost: float | None = None
    scores: list[Score] = Field(default_factory=list)
    passed: bool = False
    error: str | None = Field(
        default=None, description="Why the run could not be forked or scored."
    )

    @property
    def same_tools(self) -> bool:
        return self.original_tools == self.new_tools


class EvalInput(BaseModel):
    """What an evaluation forks, how, and what it must pass."""

    runs: list[str] = Field(min_length=1, max_length=MAX_EVAL_RUNS)
    at: int = Field(default=0, ge=0, description="The turn each fork goes on from.")
    model: str | None = None
    instructions: str | None = None
    agent: str | None = None
    policy: ForkPolicy = "recorded"
    concurrency: int = Field(default=8, ge=1, le=MAX_EVAL_CONCURRENCY)
    threshold: float = Field(default=1.0, ge=0, le=1, description="The pass rate it must reach.")
    scorers: list[str] | None = Field(
        default=None, description="The app's scorers to use, by name (None: all of them)."
    )
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="Per model spec, to tell each run's cost."
    )
    query: str | None = Field(default=None, description="The listing the runs came from.")

    @field_validator("model")
    @classmethod
    def _check_model(cls, model: str | None) -> str | None:
        if model is not None:
            parse_model_spec(model)  # refused at the start, not by each fork's first call
        return model

    def fork_request(self, run_id: str) -> ForkRequest:
        """The fork of `run_id` this evaluation asks for."""
        settings = self.model_dump(include=set(ForkRequest.model_fields) - {"run_id"})
        return ForkRequest(run_id=run_id, **settings)


class ScoreInput(BaseModel):
    """Input of the `score_fork` activity."""

    run_id: str
    fork_id: str
    at: int
    scorers: list[str] | None = None
    prices: dict[str, ModelPrice] = Field(default_factory=dict)


class EvalReport(BaseModel):
    """An evaluation's report: its rows so far (all of them once it ended) and its verdict."""

    eval_id: str
    input: EvalInput
    rows: list[EvalRow] = Field(default_factory=list)
    done: bool = False

    @property
    def passed(self) -> int:
        return sum(row.passed for row in self.rows)

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.rows) if self.rows else 0.0

    @property
    def holds(self) -> bool:
        """Whether the pass rate reached the threshold (every run scored)."""
        return self.done and self.pass_rate >= self.input.threshold
