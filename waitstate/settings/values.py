"""How each variable's text becomes a value: checked, and refused with a message that names the
variable and never repeats a secret. `Settings.from_env` reads the environment through these.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from urllib.parse import urlsplit

from waitstate.notices import EmailRoute, Route, SmtpServer, parse_smtp

DEFAULT_TASK_QUEUE = "waitstate-agents"
DEFAULT_DEPLOYMENT = "waitstate"
DEFAULT_THREAD_TOKEN_LIFETIME = timedelta(days=30)
MAX_THREAD_TOKEN_DAYS = 366.0


def port(env: Mapping[str, str], name: str, default: int) -> int:
    """A port number (1-65535, or 0 for any free one) from `env[name]`, or `default` if
    unset.

    Raises:
        ValueError: it is not one; the message names the variable.
    """
    text = env.get(name, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or not 0 <= int(text) < 65536:
        raise ValueError(
            f"{name} must be a port number (1-65535, 0 for any free one); got {text!r}"
        )
    return int(text)


def count(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole number, 0 or more, from `env[name]`, or `default` if unset.

    Raises:
        ValueError: it is not one; the message names the variable.
    """
    text = env.get(name, "").strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{name} must be a whole number, 0 or more; got {text!r}")
    return int(text)


def seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A number of seconds (0 or more) from `env[name]`, or `default` if unset.

    Raises:
        ValueError: it is not such a number; the message names the variable.
    """
    value = _number(env, name, lambda value: value >= 0, "a number of seconds, 0 or more")
    return default if value is None else value


def lifetime_days(env: Mapping[str, str], name: str) -> timedelta:
    """A thread token's lifetime from `env[name]`, in days (default 30).

    Raises:
        ValueError: it is not a number of days over 0 and at most a year (366).
    """
    days = _number(
        env,
        name,
        lambda days: 0 < days <= MAX_THREAD_TOKEN_DAYS,
        f"a number of days over 0 and at most {MAX_THREAD_TOKEN_DAYS:g}",
    )
    return DEFAULT_THREAD_TOKEN_LIFETIME if days is None else timedelta(days=days)


def switch(env: Mapping[str, str], name: str) -> bool:
    """An on/off variable: `1`, `true`, `yes` or `on` (any case) turn it on; unset, empty, `0`,
    `false`, `no` or `off` leave it off.

    Raises:
        ValueError: any other value; the message names the variable.
    """
    text = env.get(name, "").strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 1 or 0 (true or false); got {text!r}")


def _number(
    env: Mapping[str, str], name: str, fits: Callable[[float], bool], wanted: str
) -> float | None:
    """The number `env[name]` says, or None if unset.

    Raises:
        ValueError: it is not a number that `fits` (nan never does): "`name` must be `wanted`".
    """
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if math.isnan(value) or not fits(value):
        raise ValueError(f"{name} must be {wanted}; got {text!r}")
    return value


def model_queue(env: Mapping[str, str]) -> tuple[str | None, float | None]:
    """WAITSTATE_MODEL_TASK_QUEUE and WAITSTATE_MODEL_CALLS_PER_SECOND, checked.

    Raises:
        ValueError: the rate is not a number over 0, or is set without the model queue (on the
            runs' own queue it would hold tool calls and polls too), or the model queue is the
            runs' own; the message names the variable.
    """
    queue = env.get("WAITSTATE_MODEL_TASK_QUEUE", "").strip() or None
    if queue is not None and queue == env.get("WAITSTATE_TASK_QUEUE", DEFAULT_TASK_QUEUE):
        raise ValueError(
            f"WAITSTATE_MODEL_TASK_QUEUE must differ from WAITSTATE_TASK_QUEUE ({queue!r}): "
            "leave it unset for model calls on the runs' own queue"
        )
    rate = _number(
        env,
        "WAITSTATE_MODEL_CALLS_PER_SECOND",
        lambda rate: 0 < rate < float("inf"),
        "a number of calls per second over 0",
    )
    if rate is None:
        return queue, None
    if queue is None:
        raise ValueError(
            "WAITSTATE_MODEL_CALLS_PER_SECOND needs WAITSTATE_MODEL_TASK_QUEUE: the limit is "
            "the model queue's (on the runs' own queue it would hold every tool call too)"
        )
    return queue, rate


def smtp_server(
    env: Mapping[str, str], routes: Mapping[str, tuple[Route, ...]]
) -> SmtpServer | None:
    """The SMTP server of WAITSTATE_SMTP_URL and WAITSTATE_SMTP_FROM (None: unset).

    Raises:
        ValueError: either is malformed, or a route sends email and WAITSTATE_SMTP_URL is
            unset: the worker stops at start, not at its first notice.
    """
    if url := env.get("WAITSTATE_SMTP_URL", "").strip():
        return parse_smtp(url, env.get("WAITSTATE_SMTP_FROM"))
    for group, destinations in routes.items():
        if any(isinstance(destination, EmailRoute) for destination in destinations):
            raise ValueError(
                f"WAITSTATE_NOTICE_ROUTES sends group {group!r} email, and WAITSTATE_SMTP_URL "
                "is not set (set it, and WAITSTATE_SMTP_FROM)"
            )
    return None


def deployment_name(name: str) -> str:
    """WAITSTATE_DEPLOYMENT, checked (empty: the default).

    Raises:
        ValueError: it holds a `.`, which Temporal reserves to join the name to a build id.
    """
    if "." in name:
        raise ValueError(f"WAITSTATE_DEPLOYMENT must not contain '.'; got {name!r}")
    return name or DEFAULT_DEPLOYMENT


def checked_build_id(build_id: str) -> str | None:
    """WAITSTATE_BUILD_ID, checked (empty: None, the worker derives one).

    Raises:
        ValueError: it is longer than the 255 characters Temporal takes.
    """
    if len(build_id) > 255:
        raise ValueError(f"WAITSTATE_BUILD_ID must be at most 255 characters; got {build_id!r}")
    return build_id or None


def otlp_traces_endpoint(env: Mapping[str, str]) -> str | None:
    """Where OTLP/HTTP traces go per the standard OTEL_* variables, or None: tracing is off."""
    disabled = env.get("OTEL_SDK_DISABLED", "").lower() == "true"
    if disabled or env.get("OTEL_TRACES_EXPORTER", "").lower() == "none":
        return None
    if traces := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return traces
    if base := env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return f"{base.rstrip('/')}/v1/traces"
    return None


def parse_token_keys(value: str) -> dict[str, str]:
    """Parse `kid:secret,kid2:secret2` (the first is the default signing key).

    Raises:
        ValueError: an entry is not `kid:secret`, or a secret is shorter than 32 characters.
    """
    return parse_keys(value, "WAITSTATE_TOKEN_KEYS")


def parse_keys(value: str, variable: str, what: str = "token key") -> dict[str, str]:
    """Parse the keys `kid:secret,kid2:secret2` of `variable` (resume-token keys, operator
    keys), in their order.

    Raises:
        ValueError: an entry is not `kid:secret`, or a secret is shorter than 32 characters;
            the message names the variable or the key's id (`what` it is), never a secret.
    """
    keys: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        key_id, sep, secret = entry.partition(":")
        if not sep or not key_id or not secret:
            raise ValueError(f"{variable} entries must be kid:secret")
        if len(secret) < 32:
            raise ValueError(f"{what} {key_id!r} is too short: use at least 32 characters")
        keys[key_id] = secret
    return keys


# S3's rules for bucket names (3-63 lowercase letters, digits, dots, hyphens), with the
# underscores that GCS also allows.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")


def parse_blob_url(url: str) -> tuple[str, str]:
    """The bucket and the key prefix (no leading or trailing `/`; may be empty) of `url`.

    `url` is `s3://BUCKET` or `s3://BUCKET/PREFIX`, the form WAITSTATE_BLOB_URL takes.

    Raises:
        ValueError: `url` is not of that form; the message says what is wrong.
    """
    expected = "expected s3://BUCKET or s3://BUCKET/PREFIX"
    parts = urlsplit(url)
    if parts.scheme.lower() != "s3":
        raise ValueError(f"WAITSTATE_BLOB_URL {url!r} is not an s3:// URL; {expected}")
    if "@" in parts.netloc:  # the URL is not repeated: it holds a secret
        raise ValueError(
            "WAITSTATE_BLOB_URL must not hold credentials: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY instead"
        )
    if not _BUCKET.fullmatch(parts.netloc):
        raise ValueError(
            f"WAITSTATE_BLOB_URL {url!r} does not name a bucket ({parts.netloc!r}: 3-63 "
            f"lowercase letters, digits, '.', '-' or '_'); {expected}. An S3-compatible "
            "server's address goes in AWS_ENDPOINT_URL"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"WAITSTATE_BLOB_URL {url!r} has a query or fragment; {expected}")
    prefix = parts.path.strip("/")
    if prefix and any(segment in ("", ".", "..") for segment in prefix.split("/")):
        raise ValueError(
            f"WAITSTATE_BLOB_URL {url!r} has an empty, '.' or '..' segment in its prefix"
        )
    return parts.netloc, prefix
