"""The `post_push` activity against a receiver of the test's (in its event loop): the task as
A2A's StreamResponse, signed with the workers' key when one is set (else the token), the
config's credentials; a 5xx or a closed port retried, a 4xx or a redirect final. Run in an
ActivityEnvironment."""

from __future__ import annotations

import dataclasses
import json
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.a2a.receiver import LOOPBACK, receiving
from tests.rigs import free_port
from waitstate.activities import PushActivities
from waitstate.schemas.errors import PUSH_REFUSED
from waitstate.schemas.pushes import PostPush, PushConfig, TaskSnapshot

KEY = "w" * 40
TOKEN = "t" * 40
RUN_ID = "a2a-0123456789abcdef-ctx.msg"


def _push(url: str, state: str = "completed") -> PostPush:
    snapshot = TaskSnapshot.model_validate(
        {
            "seq": 7,
            "state": state,
            "at": datetime(2026, 12, 5, tzinfo=UTC),
            "status": "completed",
            "answer": "done",
        }
    )
    config = PushConfig(
        id="hook", url=url, token=TOKEN, auth_scheme="Bearer", auth_credentials="cred"
    )
    return PostPush(config=config, task=snapshot)


def _environment() -> ActivityEnvironment:
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, workflow_id=RUN_ID)
    return environment


async def test_a_push_is_the_task_signed_with_the_workers_key() -> None:
    async with receiving() as receiver, httpx.AsyncClient() as http:
        await _environment().run(
            PushActivities(http, KEY, {}, LOOPBACK).post_push, _push(receiver.url)
        )
    [push] = receiver.pushes

    assert push.task["id"] == "ctx.msg" and push.task["contextId"] == "ctx"
    assert push.state == "TASK_STATE_COMPLETED"
    assert push.task["artifacts"][0]["parts"][0]["text"] == "done"
    assert push.key == "ctx.msg:7"
    assert push.headers["x-a2a-notification-token"] == TOKEN
    assert push.headers["authorization"] == "Bearer cred"
    assert push.signed_with(KEY) and not push.signed_with(TOKEN)
    assert json.loads(push.body) == {"task": push.task}


@pytest.mark.parametrize(("answer", "retried"), [(500, True), (429, True), (400, False)])
async def test_what_a_receivers_answer_means(answer: int, retried: bool) -> None:
    async with receiving(answers=[answer]) as receiver, httpx.AsyncClient() as http:
        with pytest.raises(ApplicationError) as failed:
            await _environment().run(
                PushActivities(http, None, {}, LOOPBACK).post_push, _push(receiver.url)
            )

    assert failed.value.non_retryable is not retried
    assert (failed.value.type == PUSH_REFUSED) is not retried


async def test_a_receiver_that_is_down_is_tried_again() -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"
    async with httpx.AsyncClient() as http:
        with pytest.raises(ApplicationError) as failed:
            await _environment().run(PushActivities(http, None, {}, LOOPBACK).post_push, _push(url))

    assert not failed.value.non_retryable


async def test_a_push_to_loopback_is_refused_unless_its_operator_allows_it() -> None:
    async with receiving() as receiver, httpx.AsyncClient() as http:
        named = receiver.url.replace("127.0.0.1", "localhost")
        refused = []
        for url in (receiver.url, named):
            with pytest.raises(ApplicationError) as failed:
                await _environment().run(PushActivities(http, None, {}).post_push, _push(url))
            refused.append(failed.value)
        # Allowed, a name is sent to the address it was checked as, under its own name.
        await _environment().run(PushActivities(http, None, {}, LOOPBACK).post_push, _push(named))

    assert all(e.non_retryable and e.type == PUSH_REFUSED for e in refused)
    assert "127.0.0.1: not a public address" in str(refused[0])
    assert "localhost is a loopback host" in str(refused[1])
    [push] = receiver.pushes  # nothing reached it before it was allowed
    assert push.headers["host"] == f"localhost:{receiver.port}"


async def test_a_name_that_resolves_to_no_address_is_tried_again() -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(ApplicationError) as failed:
            url = "https://push.invalid/hook"  # .invalid never resolves (RFC 6761)
            await _environment().run(PushActivities(http, None, {}).post_push, _push(url))

    assert not failed.value.non_retryable


def _certificate(name: str, directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for `name`: the server's context, and a client's that trusts
    it alone."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    return server, ssl.create_default_context(cafile=str(cert_file))


@pytest.mark.parametrize(("certified", "sent"), [("localhost", True), ("other.example", False)])
async def test_over_tls_a_pinned_push_is_checked_against_the_urls_name(
    tmp_path: Path, certified: str, sent: bool
) -> None:
    # Sent to 127.0.0.1, the address `localhost` was checked as; TLS still verifies the
    # certificate against `localhost`: one for another name is not trusted.
    server, trusting = _certificate(certified, tmp_path)
    async with receiving(tls=server) as receiver, httpx.AsyncClient(verify=trusting) as http:
        push = _push(receiver.url.replace("127.0.0.1", "localhost"))
        activities = PushActivities(http, None, {}, LOOPBACK)
        if sent:
            await _environment().run(activities.post_push, push)
        else:
            with pytest.raises(ApplicationError) as failed:
                await _environment().run(activities.post_push, push)
            assert not failed.value.non_retryable  # a connection error: tried again

    assert len(receiver.pushes) == (1 if sent else 0)
    if sent:
        assert receiver.pushes[0].headers["host"] == f"localhost:{receiver.port}"
