"""A task's push notification configurations, as A2A's methods set, read and delete them: each
is checked here (`PushConfig`: an https URL, bounded credentials), then kept by the task's run
(`WaitstateClient.push_config`), which pushes each change of the task's state to it
(workflows/pushes.py). Pushes are for task runs: a message in a context's conversation has none.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from urllib.parse import urlsplit

from a2a.types import AuthenticationInfo, TaskPushNotificationConfig
from a2a.utils.errors import A2AError, InvalidParamsError, PushNotificationNotSupportedError
from pydantic import ValidationError

from waitstate.a2a import errors, shapes
from waitstate.client import ClientError, WaitstateClient
from waitstate.outbound import AddressRefused, Network, check_host
from waitstate.schemas.pushes import PushConfig, PushConfigChange

NOT_FOR_MESSAGES = (
    "push notifications are for task runs: a message in a context's conversation has none "
    "(read it with GetTask, or stream it)"
)


def config_of(given: TaskPushNotificationConfig, networks: Sequence[Network] = ()) -> PushConfig:
    """The client's configuration, checked (its id, if it gives none, from its URL): a URL
    whose host is a non-public address outside `networks`, or `localhost`, is refused here;
    the worker checks what a name resolves to when it sends.

    Raises:
        InvalidParamsError: it is not one we push to, saying why.
    """
    auth = given.authentication if given.HasField("authentication") else None
    try:
        config = PushConfig(
            id=given.id or f"push-{hashlib.sha256(given.url.encode()).hexdigest()[:12]}",
            url=given.url,
            token=given.token or None,
            auth_scheme=auth.scheme if auth is not None else None,
            auth_credentials=auth.credentials if auth is not None else None,
        )
        check_host(urlsplit(config.url).hostname or "", networks)
    except ValidationError as err:
        problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
        raise InvalidParamsError(message=f"push notification config refused: {problems}") from None
    except AddressRefused as err:
        raise InvalidParamsError(message=f"push notification config refused: {err}") from None
    return config


def shown(config: PushConfig, task_id: str) -> TaskPushNotificationConfig:
    """A configuration as A2A carries it back to its client (its secrets are not shown back)."""
    shown = TaskPushNotificationConfig(id=config.id, task_id=task_id, url=config.url)
    if config.auth_scheme:
        shown.authentication.CopyFrom(AuthenticationInfo(scheme=config.auth_scheme))
    return shown


def for_task_runs(task_id: str) -> None:
    """Refuse a push configuration for a message in a conversation."""
    if shapes.in_conversation(task_id):
        raise PushNotificationNotSupportedError(message=NOT_FOR_MESSAGES)


async def change(
    client: WaitstateClient, run_id: str, task_id: str, change: PushConfigChange
) -> list[PushConfig]:
    """Send the change to the task's run: its configurations after it.

    Raises:
        A2AError: the run refused it, or could not be reached (`errors.refusal`).
    """
    try:
        return (await client.push_config(run_id, change)).configs
    except ClientError as err:
        raise errors.refusal(err, task_id) from err


async def configs(client: WaitstateClient, run_id: str, task_id: str) -> list[PushConfig]:
    """The task's configurations, as its run keeps them.

    Raises:
        A2AError: the run could not be read.
    """
    try:
        state = await client.query(run_id)
    except ClientError as err:
        raise errors.refusal(err, task_id) from err
    return list(state.push.configs) if state.push is not None else []


def not_found(config_id: str) -> A2AError:
    return InvalidParamsError(message=f"the task has no push notification config {config_id!r}")
