"""What the services share: the names and callback URLs they accept, the Idempotency-Key header
of a start, and row counts that look real."""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from fastapi import Header
from pydantic import AfterValidator

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=1000)]

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")


def check_name(value: str, what: str) -> str:
    """`value` if it is a name the services accept (a dataset, a folder), else a ValueError
    that says what one is."""
    if not _NAME.fullmatch(value):
        raise ValueError(
            f"{what} must be 1-100 lowercase letters, digits, '_' or '-', e.g. 'transactions'"
        )
    return value


def check_callback_url(value: str) -> str:
    """`value` if it is an http:// or https:// URL, else a ValueError that says so."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("callback_url must be an http:// or https:// URL")
    return value


def _dataset_name(value: str) -> str:
    return check_name(value, "dataset")


# The dataset a long job (an export, an enrichment, a purge) works on.
DatasetName = Annotated[str, AfterValidator(_dataset_name)]


def stable_number(text: str) -> int:
    """A row count that looks real and is the same for the same request, in every process."""
    digest = hashlib.sha256(text.encode()).digest()
    return 100_000 + int.from_bytes(digest[:8], "big") % 900_000
