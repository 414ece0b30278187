"""What a page's form carries back to prove it was sent from the page the gateway rendered, and
how a form sent from another site is told apart.

A page's URL carries a resume token, and its form sends that token back with a form key: a MAC
over the token's run, subject, nonce and expiry, under the gateway's token keys. Only the
gateway can make it, a page rendered for that token carries it, and it is the same on every
render (no state kept between the GET and the POST). Besides, a browser says where a form came
from: `Sec-Fetch-Site` must be `same-origin` and `Origin` this gateway's host, when they are
sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

from waitstate.auth.tokens import ResumeClaims, ResumeTokens

# The subject a form key is minted for: no route takes a token for it (a subject with a slash
# is never one path segment, and none starts so), and only a digest of its MAC is shown.
_FORM_SUBJECT = "page-form/{subject}"
_FORM_LABEL = b"waitstate page form\x00"


def form_key(tokens: ResumeTokens, claims: ResumeClaims) -> str:
    """The form key of the pages of the token `claims` came from.

    `ResumeTokens` keeps its keys to itself, so the MAC is its own: the signature of a token
    for a subject of pages' forms, with the same run, nonce and expiry, signed with the
    current signing key (a page rendered before a rotation of the signing key asks to be
    opened again). What the page carries is a digest of that signature, never a token.
    """
    minted = tokens.mint(
        claims.workflow_id,
        _FORM_SUBJECT.format(subject=claims.operation_id),
        claims.expires_at,
        nonce=claims.nonce,
    )
    signature = minted.token.rpartition(".")[2]
    digest = hashlib.sha256(_FORM_LABEL + signature.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def form_key_matches(tokens: ResumeTokens, claims: ResumeClaims, sent: str) -> bool:
    """Whether `sent` is the form key of the pages of the token `claims` came from."""
    return hmac.compare_digest(form_key(tokens, claims).encode(), sent.encode(errors="replace"))


def cross_site(headers: Mapping[str, str]) -> str | None:
    """Why a form's request did not come from a page of this gateway, by what the browser said
    of it (None: it did, or the browser did not say).

    `Origin: null` says nothing: a browser sends it for a page whose policy is `no-referrer`,
    as every page here is. The host is `Host`, or the `X-Forwarded-Host` of a proxy in front
    (a cross-site form cannot set either).
    """
    site = headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return f"the form was sent from another site (Sec-Fetch-Site: {site[:40]})"
    origin = headers.get("origin")
    if origin is None or origin == "null":
        return None
    hosts = {headers.get("host", ""), *headers.get("x-forwarded-host", "").split(",")}
    hosts = {host.strip() for host in hosts} - {""}
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:  # e.g. an unclosed IPv6 bracket: no origin of ours
        netloc = ""
    if netloc not in hosts:
        return "the form was sent from another site (its Origin is not this gateway)"
    return None
