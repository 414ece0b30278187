"""Where a worker may send what a caller from outside names (an A2A client's push webhook): to a
public address, or to one in the networks the operator allows (WAITSTATE_A2A_PUSH_NETWORKS).

Without this, a caller with a key could make the worker POST to what only the worker's network
reaches: a service on its loopback (Temporal's frontend, a metrics or admin port), a cloud's
metadata address (169.254.169.254), a host of the private network. So a URL's host is checked
twice: as given, when the config is taken (an address or `localhost` is refused at once), and as
resolved, at each send. The send then connects to the very address it checked (the URL's host
kept for `Host` and TLS), so a name that resolves to a public address for the check and to a
private one for the connection (DNS rebinding) reaches nothing it should not.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
NETWORKS_VARIABLE = "WAITSTATE_A2A_PUSH_NETWORKS"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


class AddressRefused(ValueError):
    """The host is, or resolves to, an address the worker may not send to."""


def parse_networks(value: str, variable: str = NETWORKS_VARIABLE) -> tuple[Network, ...]:
    """Comma-separated networks (`10.1.0.0/16`, `127.0.0.1`, `::1/128`).

    Raises:
        ValueError: one is not a network; the message names the variable and the entry.
    """
    networks = []
    for entry in filter(None, (part.strip() for part in value.split(","))):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"{variable} is a comma-separated list of networks (10.1.0.0/16, 127.0.0.1); "
                f"got {entry!r}"
            ) from None
    return tuple(networks)


def address_of(text: str) -> Address | None:
    """`text` as an address (an IPv4 one written as IPv6, `::ffff:10.0.0.1`, as the IPv4 one),
    or None for a name."""
    try:
        address = ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine: a loopback address, or `localhost`. The one rule for
    the MCP and A2A servers' trusted Origins, plain-http push URLs, and pushes here."""
    name = host.rstrip(".").lower()
    address = address_of(name)
    return address.is_loopback if address is not None else name in LOOPBACK_NAMES


def check_address(address: Address, allowed: Sequence[Network]) -> Address:
    """`address`, if the worker may send to it: a public one, or one in `allowed`.

    Raises:
        AddressRefused: it is loopback, private, link-local, shared, reserved, multicast or
            unspecified, and in none of `allowed`.
    """
    if any(address in network for network in allowed):
        return address
    if not address.is_global or address.is_multicast or address.is_reserved:
        raise AddressRefused(f"{address}: not a public address, and not in {NETWORKS_VARIABLE}")
    return address


def check_host(host: str, allowed: Sequence[Network]) -> None:
    """Refuse a host given as an address the worker may not send to, or as a loopback name; a
    name is left to `pinned`, which checks what it resolves to from where it sends.

    Raises:
        AddressRefused: why.
    """
    name = host.rstrip(".").lower()
    if (address := address_of(name)) is not None:
        check_address(address, allowed)
    elif is_loopback(name) and not any(LOOPBACK in network for network in allowed):
        raise AddressRefused(f"{name} is a loopback host, and not in {NETWORKS_VARIABLE}")


@dataclass(frozen=True)
class Pinned:
    """A request's target bound to one checked address: sent to `url` with `headers` and
    `extensions` (httpx's), the connection goes to that address, with the URL's host for
    `Host` and TLS (its certificate is checked against the name)."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, str] = field(default_factory=dict)


async def pinned(url: str, allowed: Sequence[Network]) -> Pinned:
    """Resolve `url`'s host; if every address it has may be sent to, the URL bound to the
    first.

    Raises:
        AddressRefused: an address of the host may not be sent to (none is sent to).
        OSError: the name did not resolve (`socket.gaierror`), maybe for a while.
        ValueError: `url` is not one (its port, say).
    """
    parts = urlsplit(url)
    given = parts.hostname or ""
    check_host(given, allowed)
    if address_of(given) is not None:
        return Pinned(url)  # an address, checked: nothing to resolve
    host = given.encode("idna").decode("ascii")  # the name as DNS and TLS know it
    port = parts.port or (443 if parts.scheme == "https" else 80)
    # The loop's resolver, in a thread, as httpx's own connect would resolve it.
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    try:
        found = [address_of(str(info[4][0])) for info in infos]
        addresses = [check_address(a, allowed) for a in found if a is not None]
    except AddressRefused as err:
        raise AddressRefused(f"{host} resolves to {err}") from None
    if not addresses:
        raise OSError(f"{host} resolved to no address")
    address = addresses[0]
    shown = f"[{address}]" if address.version == 6 else str(address)
    suffix = "" if parts.port is None else f":{parts.port}"
    bound = urlunsplit(parts._replace(netloc=shown + suffix))
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return Pinned(bound, {"Host": host + suffix}, extensions)
