"""The A2A push activity: one state of a task run, POSTed to one of its client's webhooks as
A2A's `StreamResponse` (a `task`), with the client's token, a signature and an idempotency key.

Headers, as both official SDKs' senders set them, and ours:
- `X-A2A-Notification-Token`: the config's token; `Authorization: SCHEME CREDENTIALS` when the
  config gives an authentication;
- `Idempotency-Key: TASK:SEQ`: one per state of the task (SEQ counts its changes): Temporal may
  deliver one push twice (a worker killed after the POST, before its completion was recorded),
  and a receiver that keeps the keys it saw takes each state once;
- `X-Waitstate-Signature: t=UNIX,v1=HEX`: HMAC-SHA256 of `UNIX.BODY` under WAITSTATE_A2A_PUSH_KEY
  (or, without one, under the config's token; no signature with neither).

A 2xx is sent; a 408, 429 or 5xx, a timeout or a connection error is retried by the run's
policy; any other answer (4xx, a redirect) is final (`PUSH_REFUSED`). The response's body is
never read. A URL whose host is, or resolves to, a loopback, private or otherwise non-public
address outside WAITSTATE_A2A_PUSH_NETWORKS is refused, and nothing is sent
(waitstate/outbound.py); the connection goes to the address that was checked.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from waitstate.agents import Agent
from waitstate.outbound import AddressRefused, Network, pinned
from waitstate.schemas.errors import PUSH_REFUSED
from waitstate.schemas.pushes import POST_PUSH, PostPush

RETRIED_STATUSES = frozenset({408, 425, 429})
PUSH_TIMEOUT = httpx.Timeout(10.0)
SIGNATURE_HEADER = "X-Waitstate-Signature"


def signature(key: str, timestamp: int, body: bytes) -> str:
    """The `X-Waitstate-Signature` value of `body` sent at `timestamp`, under `key`."""
    signed = f"{timestamp}.".encode() + body
    digest = hmac.new(key.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class PushActivities:
    """Sends A2A pushes over `http`, signed with `key` (None: with each receiver's token), to
    public addresses and those in `networks`; `agents` tell which answers are structured."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        key: str | None,
        agents: Mapping[str, Agent] | None,
        networks: Sequence[Network] = (),
    ) -> None:
        self._http = http
        self._key = key
        self._agents = agents or {}
        self._networks = tuple(networks)

    @activity.defn(name=POST_PUSH)
    async def post_push(self, input: PostPush) -> None:
        """POST the task's state to the config's URL.

        Raises:
            ApplicationError: retryable for a 408/425/429/5xx, a timeout, a connection error
                or a name that did not resolve; non-retryable (`PUSH_REFUSED`) for any other
                answer, and for an address the worker may not send to.
        """
        try:
            # optional: the a2a SDK (the `a2a` extra), loaded by a worker whose runs push.
            from waitstate.a2a.pushed import task_body
        except ImportError as err:
            raise ApplicationError(
                f"this worker cannot send A2A pushes: install waitstate[a2a] ({err})",
                type=PUSH_REFUSED,
                non_retryable=True,
            ) from None
        config, snapshot = input.config, input.task
        agent = self._agents.get(snapshot.agent or "")
        structured = agent is not None and agent.output_type is not None
        task_id, task = task_body(activity.info().workflow_id or "", snapshot, structured)
        body = json.dumps(task).encode()
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": f"{task_id}:{snapshot.seq}",
        }
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        if config.auth_scheme and config.auth_credentials:
            headers["Authorization"] = f"{config.auth_scheme} {config.auth_credentials}"
        key = self._key or config.token
        if key:
            headers[SIGNATURE_HEADER] = signature(key, int(time.time()), body)
        try:
            async with asyncio.timeout(PUSH_TIMEOUT.connect):
                target = await pinned(config.url, self._networks)
        except AddressRefused as err:
            raise ApplicationError(
                f"push to {config.id} refused: {err}", type=PUSH_REFUSED, non_retryable=True
            ) from None
        except (OSError, TimeoutError) as err:
            raise ApplicationError(f"push to {config.id} not sent: {err}") from None
        try:
            request = self._http.build_request(
                "POST",
                target.url,
                content=body,
                headers={**headers, **target.headers},
                extensions=target.extensions,
                timeout=PUSH_TIMEOUT,
            )
            response = await self._http.send(request, stream=True, follow_redirects=False)
            await response.aclose()  # its body is not read
        except httpx.HTTPError as err:
            raise ApplicationError(f"push to {config.id} not sent: {type(err).__name__}") from None
        code = response.status_code
        if 200 <= code < 300:
            activity.logger.info("pushed %s #%d to %s", snapshot.state, snapshot.seq, config.id)
            return
        retried = code >= 500 or code in RETRIED_STATUSES
        raise ApplicationError(
            f"push to {config.id} answered {code}",
            type=None if retried else PUSH_REFUSED,
            non_retryable=not retried,
        )
