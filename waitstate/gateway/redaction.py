"""No log line carries a token or a piece of one: the gateway reads tokens from the Authorization
header only and logs paths through `redact`, and `RedactTokens` strips anything shaped like a
token from the lines of the server around it (uvicorn's access log prints the query string).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

# A resume token is base64url claims (JSON, so `eyJ...`), a dot and a 43-character base64url
# signature. Any run of 40 base64url characters or more (ids here are shorter: a request id is
# a 36-character UUID), or a start of the claims, is taken for one or a piece of one.
_TOKENISH = re.compile(r"[A-Za-z0-9_-]{40,}|eyJ[A-Za-z0-9_-]{5,}")
_QUERY_VALUE = re.compile(r"([?&][^=\s&#\"']*=)[^\s&#\"']*")
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """`text` fit for a log line: what is shaped like a resume token or a piece of one, and the
    value of every query parameter (`?token=...`), replaced by `[redacted]`."""
    text = _QUERY_VALUE.sub(rf"\g<1>{REDACTED}", text)
    return _TOKENISH.sub(REDACTED, text)


class RedactTokens(logging.Filter):
    """Redacts every log record it sees, for the loggers of the server the app runs in:
    uvicorn's access log prints each request's path with its query string. A path (an argument
    that starts with `/`) loses its query string whole (the gateway takes none: one is a token
    sent as `?token=`, or noise); the rest goes through `redact`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(arg) for arg in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {key: _redact_arg(arg) for key, arg in record.args.items()}
        return True


def _redact_arg(arg: object) -> object:
    if not isinstance(arg, str):
        return arg
    path, question_mark, _ = arg.partition("?")
    if arg.startswith("/") and question_mark:
        return f"{redact(path)}?{REDACTED}"
    return redact(arg)
