"""Content-addressed blob storage, and large results kept by reference instead of in history."""

from waitstate.blobs.results import shrink
from waitstate.blobs.store import (
    REF_PREFIX,
    BlobNotFound,
    BlobStore,
    LocalBlobStore,
    parse_ref,
    ref_for,
)

__all__ = [
    "REF_PREFIX",
    "BlobNotFound",
    "BlobStore",
    "LocalBlobStore",
    "parse_ref",
    "ref_for",
    "shrink",
]
