"""The custom search attributes that make runs filterable in the Web UI's list view, for the
workflow's parts: they are defined in `waitstate.names`, where the library reads them too."""

from waitstate.names import (
    AGENT_NAME,
    AGENT_STATUS,
    PENDING_OPERATIONS,
    WAIT_EXPIRES_AT,
    WAIT_KINDS,
    WAITING_FOR,
)
from waitstate.names import SEARCH_ATTRIBUTES as ALL

__all__ = (
    "AGENT_NAME",
    "AGENT_STATUS",
    "ALL",
    "PENDING_OPERATIONS",
    "WAITING_FOR",
    "WAIT_EXPIRES_AT",
    "WAIT_KINDS",
)
