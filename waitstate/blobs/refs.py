"""Blob references: `ref://blobs/<sha256 hex>`, the error for one that names nothing, and the
error for a store that cannot be reached."""

from __future__ import annotations

import re

REF_PREFIX = "ref://blobs/"
DIGEST = re.compile(r"[0-9a-f]{64}")
# Where a store keeps its records (small named values written once), and what names one: path
# segments of letters, digits, `.`, `_` and `-`, never starting with a dot (no `..`).
RECORDS_DIR = "records"
RECORD_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*")
MAX_RECORD_NAME = 300
# What a BlobNotFound adds: the usual cause is a worker configured with a store of its own.
SHARE_ONE_STORE = "workers of one fleet must share one store"


class BlobNotFound(KeyError):
    """No blob is stored under that reference."""

    def __str__(self) -> str:
        # KeyError's own str() is the repr of its argument; a message reads better unquoted.
        return str(self.args[0]) if self.args else "blob not found"


def ref_for(digest: str) -> str:
    """The reference of the blob whose SHA-256 (lowercase hex) is `digest`.

    Raises:
        ValueError: `digest` is not 64 lowercase hex characters.
    """
    if not DIGEST.fullmatch(digest):
        raise ValueError(f"not a sha256 hex digest: {digest!r}; expected 64 lowercase hex chars")
    return REF_PREFIX + digest


def parse_ref(ref: str) -> str:
    """The SHA-256 hex digest a reference names.

    Only `ref://blobs/` followed by exactly 64 lowercase hex characters is accepted, so a
    reference can never name a path outside the store (`ref://blobs/../../etc/passwd`).

    Raises:
        ValueError: `ref` is not a blob reference.
    """
    expected = f"expected {REF_PREFIX}<sha256> with 64 lowercase hex chars"
    if not isinstance(ref, str) or not ref.startswith(REF_PREFIX):
        raise ValueError(f"not a blob reference: {ref!r}; {expected}")
    digest = ref[len(REF_PREFIX) :]
    # fullmatch, not match with `$`: `$` would also accept a trailing newline.
    if not DIGEST.fullmatch(digest):
        raise ValueError(f"malformed blob reference: {ref!r}; {expected}")
    return digest


def check_record_name(name: str) -> str:
    """`name`, if it may name a record: it can never name a path outside the store's records.

    Raises:
        ValueError: `name` is empty, too long, or not segments of `[A-Za-z0-9._-]`.
    """
    if len(name) > MAX_RECORD_NAME or not RECORD_NAME.fullmatch(name):
        raise ValueError(
            f"not a record name: {name[:100]!r}; expected at most {MAX_RECORD_NAME} characters "
            "of segments of letters, digits, '.', '_' and '-' joined by '/'"
        )
    return name


class BlobStoreUnavailable(OSError):
    """The store could not be read or written: a directory that is read-only, full or gone,
    object storage unreachable or refusing. An outage, not a fault of the data: worth waiting
    out, and nothing was changed by the call that met it (a write is whole or absent)."""
