"""Inputs and results of the blob cleanup: its workflow, and its activities' names."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field

CLEAN_BLOBS = "clean_blobs"
NAMESPACE_RETENTION = "namespace_retention"


class CleanupInput(BaseModel):
    """Input of `BlobCleanupWorkflow`."""

    retention: timedelta | None = Field(
        default=None,
        description="How long after a run ends its blobs are kept (None: the namespace's "
        "workflow retention, read from Temporal).",
    )


class NamespaceRetention(BaseModel):
    """Result of the `namespace_retention` activity."""

    namespace: str
    retention: timedelta


class CleanInput(BaseModel):
    """Input of the `clean_blobs` activity."""

    now: datetime = Field(
        description="The cleanup's time (the workflow's): the cutoff is now - retention."
    )
    retention: timedelta = Field(description="How long after a run ends its blobs are kept.")


class CleanResult(BaseModel):
    """What a cleanup did: every blob examined is deleted or kept for one reason."""

    retention: timedelta = Field(default=timedelta(0), description="The retention it applied.")
    examined: int = Field(default=0, description="Blobs looked at.")
    deleted: int = Field(
        default=0, description="Blobs deleted: every owner ended before the cutoff."
    )
    bytes_deleted: int = Field(default=0, description="Their size in bytes.")
    kept_open: int = Field(
        default=0, description="Kept: a run that owns it is open (or wrote it just now)."
    )
    kept_recent: int = Field(
        default=0, description="Kept: written, or its last owner ended, within the retention."
    )
    unowned: int = Field(
        default=0, description="Kept: no run is recorded as its owner (written before owners were)."
    )
    restored: int = Field(
        default=0, description="Blobs a cleanup that died had set aside, put back for their owners."
    )
