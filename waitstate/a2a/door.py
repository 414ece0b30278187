"""Who may call the A2A server: a request to an agent's JSON-RPC endpoint carries a bearer
token that is one of the caller keys (`WAITSTATE_A2A_CALLER_KEYS`, `caller:secret`, checked as
the MCP server's are, by `OperatorKeys`); the caller is the key's id, and every task it starts is
its own. Agent cards are public (they say how to call, never what was called).

A request without a key it may use is answered 401 with `WWW-Authenticate: Bearer` and a JSON
body saying why, and never reaches A2A: nothing is parsed, nothing is started.
"""

from __future__ import annotations

import json

from starlette.authentication import AuthCredentials, SimpleUser
from starlette.types import ASGIApp, Receive, Scope, Send

from waitstate.auth.operators import OperatorKeys

CARD_SUFFIX = "/.well-known/agent-card.json"


class CallerAuth:
    """Admits a request to `app` whose bearer token is one of `keys` (its caller the key's
    id, as the request's user); a GET of an agent card needs none."""

    def __init__(self, app: ASGIApp, keys: OperatorKeys) -> None:
        self._app, self._keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _public(scope):
            await self._app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        caller = self._keys.identify(token.strip()) if scheme.lower() == "bearer" else None
        if caller is None:
            await _unauthorized(send)
            return
        scope["user"] = SimpleUser(caller)
        scope["auth"] = AuthCredentials(["caller"])
        await self._app(scope, receive, send)


def _public(scope: Scope) -> bool:
    return scope.get("method") in ("GET", "HEAD") and str(scope.get("path", "")).endswith(
        CARD_SUFFIX
    )


async def _unauthorized(send: Send) -> None:
    body = json.dumps(
        {
            "error": "unauthorized",
            "message": "send a caller key of the server's operator: Authorization: Bearer <key>",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="waitstate"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
