"""The custom search attributes that make runs filterable in the Web UI's list view."""

from temporalio.common import SearchAttributeKey

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
WAITING_FOR = SearchAttributeKey.for_keyword("WaitingFor")
# What WaitingFor holds: an operation's webhook or poll, a person's decision or answer; `none`
# while the run works (a model turn, a tool call).
WAIT_KINDS = ("webhook", "poll", "approval", "input", "none")
PENDING_OPERATIONS = SearchAttributeKey.for_int("PendingOperations")
WAIT_EXPIRES_AT = SearchAttributeKey.for_datetime("WaitExpiresAt")
# Set when a run of a named agent starts (by the client, never upserted by the run).
AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")

ALL = (AGENT_STATUS, WAITING_FOR, PENDING_OPERATIONS, WAIT_EXPIRES_AT, AGENT_NAME)
