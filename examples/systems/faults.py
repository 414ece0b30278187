"""The failures tests inject into the systems (`POST /_test/faults`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from waitstate import OperationError


class Faults(BaseModel):
    """Failures to inject. `POST /_test/faults` changes only the fields it sends.

    Job faults (`never_complete`, `fail_jobs`, `duplicate_webhooks` and the durations) apply
    to the jobs started after they are set, so a job behaves the same from start to end.

    The systems keep one `Faults` that every service reads: `apply` and `clear` change it in
    place.
    """

    fail_next_starts: int = Field(
        default=0, ge=0, description="Answer 503 to the next n starts, before creating a job."
    )
    accept_then_fail_next_starts: int = Field(
        default=0,
        ge=0,
        description="Create (or find) the job, then answer 503: the caller never sees it.",
    )
    never_complete: bool = Field(default=False, description="Jobs stay running forever.")
    fail_jobs: OperationError | None = Field(
        default=None, description="Jobs end failed with this error."
    )
    duplicate_webhooks: int = Field(
        default=1, ge=1, description="Send each webhook this many times."
    )
    webhook_give_up_seconds: float | None = Field(
        default=None,
        ge=0,
        description="Stop sending a webhook that was not taken this long after its first "
        "attempt (the app's `WebhookRetry.give_up_after` by default; 0: one attempt only).",
    )
    fail_cancels: int = Field(
        default=0,
        ge=0,
        description="Answer 503 to the next n cancels, leaving their jobs running.",
    )
    progress_reports: int = Field(
        default=0,
        ge=0,
        le=20,
        description="Callback jobs post this many `running` reports (progress 'NN%'), evenly "
        "spread over the job, before the final one. With `hold_start_answers_seconds` longer "
        "than the job, every report reaches the gateway before the start is answered.",
    )
    hold_start_answers_seconds: float = Field(
        default=0,
        ge=0,
        description="Create the job, then wait this long before answering the start: a "
        "window in which a test can kill the caller after the job was accepted.",
    )
    export_seconds: float | None = Field(
        default=None, ge=0, description="Export duration; also each step of a purge."
    )
    pipeline_seconds: float | None = Field(default=None, ge=0, description="Pipeline duration.")
    purge_schemas: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="The purges of these datasets ask in the schema given (by dataset) instead "
        "of {confirm: boolean}: a hostile job, to test what receives its question (a "
        "backtracking pattern, a malformed schema).",
    )
    held_purges: list[str] = Field(
        default_factory=list,
        description="The purges of these datasets ask only once told to (`POST "
        "/_test/purges/{dataset}/ask`): a test decides when the question comes.",
    )
    accept_then_fail_next_refunds: int = Field(
        default=0,
        ge=0,
        description="Issue (or find) the refund, then answer 503: the caller never sees it.",
    )

    def apply(self, changes: Faults) -> None:
        """Take the faults `changes` was given (the fields set in it), keep the others."""
        changed = changes.model_dump(include=changes.model_fields_set)
        self._become(Faults.model_validate({**self.model_dump(), **changed}))

    def clear(self) -> None:
        """No fault any more."""
        self._become(Faults())

    def _become(self, other: Faults) -> None:
        for name in Faults.model_fields:
            setattr(self, name, getattr(other, name))
