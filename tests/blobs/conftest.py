"""A real S3-protocol server for the blob tests: moto in server mode, a process of its own on a
free port, spoken to over HTTP by the same client the workers use."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from obstore.store import S3Store

from tests.rigs import ServerProcess, free_port
from tests.tiers import SUBPROCESS, needs
from waitstate.blobs import LocalBlobStore
from waitstate.blobs.s3 import S3BlobStore

BUCKET = "waitstate-test"
# moto accepts any credentials; these keep the client from looking for real ones (instance
# metadata, a profile) on the machine running the tests.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    """The server's address and the bucket the tests share (each test takes its own prefix)."""

    endpoint: str
    bucket: str = BUCKET

    def store(self, prefix: str) -> S3BlobStore:
        """A store at `prefix` of the bucket, with the test credentials."""
        return S3BlobStore(
            self.bucket,
            prefix,
            endpoint=self.endpoint,
            config={
                "access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                "region": REGION,
            },
        )

    def bucket_store(self) -> S3Store:
        """The whole bucket through the client itself, to look at and plant objects by key."""
        return S3Store(
            self.bucket,
            endpoint=self.endpoint,
            client_options={"allow_http": True},
            access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region=REGION,
        )

    def env(self, prefix: str) -> dict[str, str]:
        """The environment that points a worker at the store at `prefix`."""
        return {
            **CREDENTIALS,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "WAITSTATE_BLOB_URL": f"s3://{self.bucket}/{prefix}",
        }


@pytest.fixture(scope="session")
@needs(SUBPROCESS)
async def s3_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[S3Server]:
    """moto's S3 server with the test bucket, for the session."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    process = ServerProcess(["-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port, log)
    await process.start()
    server = S3Server(f"http://127.0.0.1:{port}")
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            (await http.put(f"{server.endpoint}/{server.bucket}")).raise_for_status()
        yield server
    finally:
        await process.stop()


@pytest.fixture
def prefix() -> str:
    """A prefix of the test's own, so tests sharing the bucket never see each other's blobs."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def s3_store(s3_server: S3Server, prefix: str) -> S3BlobStore:
    """A store at the test's own prefix."""
    return s3_server.store(prefix)


@pytest.fixture(params=["dir", pytest.param("s3", marks=pytest.mark.subprocess)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> LocalBlobStore | S3BlobStore:
    """Each kind of store in turn, the test's own: a directory, then the bucket at the test's
    own prefix. (Modules about one kind give their own `store`.)"""
    if request.param == "dir":
        return LocalBlobStore(tmp_path / "blobs")
    server: S3Server = request.getfixturevalue("s3_server")
    return server.store(request.getfixturevalue("prefix"))
