"""The data converter every client and worker uses: pydantic JSON, with fields left at their
defaults omitted, except in a run's input.

History is a run's durable state and the largest thing it costs, so what an activity is asked
and answers is recorded without `"tool_call_id": null, "is_error": false, ...`: a field equal to
its default decodes to that same default. A run's input (`RunInput`, with whatever it carries
across continue-as-new) is recorded whole: its defaults are policy (timeouts, turns, approval),
and a run keeps the policy it was started with even if a later release changes a default.
Only its unset fields (None) are left out: a field whose default is None keeps that default.
And a run of an agent, as it starts, leaves out what its agent's definition will set
(`AGENT_FIELDS` its starter did not set, at their defaults): its opening replaces them with the
definition the `resolve_agent` activity records, before they are read. A continued run's input
(`carry` set) is resolved already, and recorded whole.
Omitted defaults are therefore part of the replay contract of activity inputs and results:
changing one of those defaults is a workflow change, like any other.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import SchemaSerializer
from pydantic_core.core_schema import any_schema
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

from waitstate.schemas.run import AGENT_FIELDS, RunInput

# Recorded with every field, defaults included.
RECORDED_WHOLE: tuple[type[Any], ...] = (RunInput,)


# Stateless, and costly to build: the SDK makes a payload converter for every serialization
# context (each workflow activation), so the serializer is built once, here.
_SERIALIZER = SchemaSerializer(any_schema())


class CompactJSONPayloadConverter(PydanticJSONPlainPayloadConverter):
    """Pydantic JSON without the fields that equal their defaults (see the module docstring)."""

    def to_payload(self, value: Any) -> Payload | None:
        """Serialize `value`; a `RECORDED_WHOLE` value keeps its defaults."""
        whole = isinstance(value, RECORDED_WHOLE)
        # Whole, but for what is unset (None): nothing to keep of it.
        data = _SERIALIZER.to_json(
            value,
            exclude_defaults=not whole,
            exclude_none=whole,
            exclude=_agents_own(value) if whole else None,
        )
        return Payload(metadata={"encoding": self.encoding.encode()}, data=data)


def _agents_own(value: Any) -> set[str] | None:
    """The fields a starting run of an agent leaves to the agent's definition (see the module's
    docstring): those its starter did not set, at their defaults."""
    if not isinstance(value, RunInput) or value.agent is None or value.carry is not None:
        return None
    fields = RunInput.model_fields
    return {
        name
        for name in AGENT_FIELDS - set(value.agent_overrides or ())
        if getattr(value, name) == fields[name].get_default(call_default_factory=True)
    } or None


class CompactPayloadConverter(CompositePayloadConverter):
    """The SDK's default converters, with compact pydantic JSON in place of plain JSON."""

    def __init__(self) -> None:
        compact = CompactJSONPayloadConverter()
        super().__init__(
            *(
                compact if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


DATA_CONVERTER = DataConverter(payload_converter_class=CompactPayloadConverter)
