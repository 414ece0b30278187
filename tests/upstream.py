"""What other libraries say, asked of them while the tests run.

Where our message passes a library's reason on (pydantic's for a field, jsonschema's for an
answer), a test expects the reason the installed library gives for the same input, never the
library's sentence written into the test: the wording is the library's, and a fresh install
changes it (issue 38). What surrounds it (the field's path, the tool's name, our prefix) is
ours, and is written out. Each helper takes the kind of failure the test means (pydantic's
error type, jsonschema's keyword), so an input that fails some other way fails the test.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails


def pydantic_error(model: Any, data: object, kind: str) -> ErrorDetails:
    """Pydantic's error of type `kind` (`missing`, `int_parsing`...) that validating `data` as
    `model` (a model class, or any type pydantic takes) gives; `data` as `str` or `bytes` is
    read as JSON, as the model's callers read what they are sent."""
    adapter: TypeAdapter[Any] = TypeAdapter(model)
    try:
        if isinstance(data, str | bytes):
            adapter.validate_json(data)
        else:
            adapter.validate_python(data)
    except ValidationError as err:
        errors = err.errors(include_url=False)
        found = [error for error in errors if error["type"] == kind]
        assert found, f"{data!r} as {model}: no {kind} error, but {errors}"
        return found[0]
    raise AssertionError(f"{data!r} is a valid {model}: the test means it not to be")


def pydantic_says(model: Any, data: object, kind: str) -> str:
    """The message of `pydantic_error(model, data, kind)`."""
    return pydantic_error(model, data, kind)["msg"]


def jsonschema_says(schema: dict[str, Any], instance: object, keyword: str) -> str:
    """jsonschema's message for `instance` failing `schema`'s `keyword` (`required`, `type`,
    `minItems`...), from the JSON Schema 2020-12 validator."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(instance))
    found = [error for error in errors if error.validator == keyword]
    assert found, f"{instance!r}: no {keyword} error, but {[e.message for e in errors]}"
    return found[0].message
