"""Where a worker may send what a caller names (waitstate/outbound.py): public addresses, and
those in the networks its operator allows; a name is checked as what it resolves to, and sent
to the very address that was checked."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from waitstate.outbound import AddressRefused, check_host, parse_networks, pinned

NOT_PUBLIC = [
    "127.0.0.1",
    "127.8.9.10",
    "::1",
    "10.0.0.5",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",  # a cloud's metadata service
    "100.64.0.1",  # shared address space
    "0.0.0.0",
    "::",
    "224.0.0.1",
    "fe80::1",
    "fd00::1",
    "::ffff:10.0.0.1",  # an IPv4 address written as IPv6 is the IPv4 one
    "::ffff:127.0.0.1",
]


@pytest.mark.parametrize("host", NOT_PUBLIC)
def test_an_address_that_is_not_public_is_refused(host: str) -> None:
    with pytest.raises(AddressRefused, match="not a public address"):
        check_host(f"[{host}]" if ":" in host else host, ())


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST.", "localhost.localdomain"])
def test_a_loopback_name_is_refused_before_it_is_resolved(host: str) -> None:
    with pytest.raises(AddressRefused, match="loopback host"):
        check_host(host, ())


def test_an_allowed_network_lets_its_addresses_through_and_no_others() -> None:
    allowed = parse_networks("10.1.0.0/16, 127.0.0.1")
    check_host("10.1.2.3", allowed)
    check_host("::ffff:10.1.2.3", allowed)
    check_host("localhost", allowed)
    check_host("93.184.215.14", ())  # public
    check_host("example.com", ())  # a name: checked when it is resolved
    with pytest.raises(AddressRefused):
        check_host("10.2.0.1", allowed)
    with pytest.raises(AddressRefused):
        check_host("127.0.0.2", allowed)


@pytest.mark.parametrize("value", ["nope", "10.0.0.0/33", "10.0.0.1/8/8"])
def test_a_bad_network_names_its_variable_and_entry(value: str) -> None:
    with pytest.raises(ValueError, match=f"WAITSTATE_A2A_PUSH_NETWORKS .*{value!r}"):
        parse_networks(f"127.0.0.1, {value}")


async def test_a_name_is_sent_to_the_address_it_was_checked_as_under_its_own_name() -> None:
    allowed = parse_networks("127.0.0.0/8, ::1")
    target = await pinned("https://localhost:8443/hook?x=1", allowed)

    sent_to = httpx.URL(target.url)  # as the push's client reads it
    assert sent_to.host in ("127.0.0.1", "::1")
    assert (sent_to.port, sent_to.path, sent_to.query) == (8443, "/hook", b"x=1")
    assert target.headers == {"Host": "localhost:8443"}
    assert target.extensions == {"sni_hostname": "localhost"}  # TLS checks the name


async def test_a_name_is_refused_if_any_address_it_resolves_to_is_not_public(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A resolver of the test's: a name whose answer holds a public and a private address, as
    # a rebinding name's may.
    answers = {"rebind.example": ["93.184.215.14", "10.0.0.7"], "public.example": ["93.184.215.14"]}

    async def getaddrinfo(host: str, port: int, **_: object) -> list[tuple[object, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers[host]]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)
    with pytest.raises(AddressRefused, match=r"rebind.example resolves to 10.0.0.7: not a public"):
        await pinned("https://rebind.example/hook", ())
    target = await pinned("https://public.example/hook", ())

    assert str(target.url) == "https://93.184.215.14/hook"
    assert target.headers == {"Host": "public.example"}
