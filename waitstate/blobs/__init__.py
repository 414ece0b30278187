"""Content-addressed blob storage, and large results kept by reference instead of in history."""

from waitstate.blobs.local import LocalBlobStore
from waitstate.blobs.refs import REF_PREFIX, BlobNotFound, BlobStoreUnavailable, parse_ref, ref_for
from waitstate.blobs.results import shrink
from waitstate.blobs.store import BlobStore
from waitstate.settings import Settings, parse_blob_url


def open_blob_store(settings: Settings) -> BlobStore:
    """The store `settings` name: object storage when `blob_url` is set, else the directory
    `blob_dir`.

    Raises:
        ValueError: `blob_url` is not an `s3://BUCKET/PREFIX` URL.
    """
    if settings.blob_url:
        # optional: obstore, loaded only by the processes that use object storage (native code).
        from waitstate.blobs.s3 import S3BlobStore

        bucket, prefix = parse_blob_url(settings.blob_url)
        return S3BlobStore(bucket, prefix, endpoint=settings.blob_endpoint)
    return LocalBlobStore(settings.blob_dir)


__all__ = [
    "REF_PREFIX",
    "BlobNotFound",
    "BlobStore",
    "BlobStoreUnavailable",
    "LocalBlobStore",
    "open_blob_store",
    "parse_ref",
    "ref_for",
    "shrink",
]
