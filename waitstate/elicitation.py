"""A job's questions, checked: the schema a question asks its answer in, and each answer against
it, in bounded time whatever either holds.

A question's `requested_schema` comes from the job (a webhook, a poll, an MCP task) and its
answer from whoever holds the link: both are untrusted. A schema is accepted only in the shape
MCP elicitation allows (one flat object of plain fields: strings, numbers, booleans, and
choices among strings), without references, within size limits, and with patterns that RE2
compiles; an answer is checked against such a schema only, within size limits, its patterns
matched by RE2, which cannot backtrack (Python's `re` takes minutes on `^(a+)+$` and thirty
`a`s and a `!`), within a budget of work. Every failure is a sentence to refuse with, never an
exception.

Pure and deterministic: the workflow checks a question when a job asks it and each answer (the
`answer` Update's validator, the model's `answer_question`); the gateway refuses a report whose
question the run would refuse. What the workflow does follows from these verdicts (a refused
question is declined by an activity; a model's answer taken is delivered by one): a change to
what is refused changes what recorded runs do on replay, so it goes behind a patch.
"""

from __future__ import annotations

import itertools
import json
import math
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import re2  # type: ignore[import-untyped]  # google-re2 ships no type information
from jsonschema.exceptions import ValidationError

from waitstate._untrusted import Limits, cut, kind_of, oversized, quote
from waitstate.names import cli_command

# What a question's schema may hold: MCP elicitation forms are small.
MAX_SCHEMA_CHARS = 64_000
MAX_PROPERTIES = 100
MAX_OPTIONS = 500  # one field's choices (enum, oneOf, a multi-select's items)
MAX_PATTERN_CHARS = 1_000
# RE2 instructions of a schema's patterns together: compiling takes about 1 ms per 3,000.
MAX_PATTERN_PROGRAM = 150_000
# What an answer may hold: a form's fields, not a document.
MAX_ANSWER_CHARS = 32_000
# RE2 matches in time proportional to text length times program size: an answer's strings may
# cost this much of it together (about 30 ms at worst).
MATCH_BUDGET = 10_000_000
# Formats a string field may declare (MCP's); they describe the field, none is asserted.
STRING_FORMATS = frozenset({"email", "uri", "date", "date-time"})
# Refusals of an answer's content are cut to this length.
_MESSAGE_CHARS = 400
_MAX_ERRORS = 5


# A flat form is at most six levels deep: root, properties, a field, its items, anyOf, a choice.
_SCHEMA_LIMITS = Limits(depth=8, nodes=20_000, chars=MAX_SCHEMA_CHARS)
# An answer is an object of plain values (a multi-select's list of strings at most); deeper
# values are refused unread.
_ANSWER_LIMITS = Limits(depth=4, nodes=1_000, chars=MAX_ANSWER_CHARS)

# Nothing a schema names is looked up or fetched: it is self-contained.
_REFERENCE_KEYWORDS = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "$defs",
        "definitions",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$recursiveAnchor",
        "$vocabulary",
    }
)
# Annotations (`title`, `description`, `default`...) and words no JSON Schema validator acts on
# (`enumNames`, `x-...`) may be anywhere; a JSON Schema keyword outside a location's list below
# is refused (`allOf`, `patternProperties`, `uniqueItems`...: each could make a check slow, or
# the form other than flat).
_JSON_SCHEMA_KEYWORDS = (
    frozenset(jsonschema.Draft202012Validator.VALIDATORS)
    | _REFERENCE_KEYWORDS
    | {"dependencies", "additionalItems", "contentSchema"}
)
_ROOT = "the schema"  # what the root's keywords are said to be of
_ROOT_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties"})
_FIELD_KEYWORDS = {
    "string": frozenset({"type", "minLength", "maxLength", "pattern", "format", "enum", "oneOf"}),
    "number": frozenset({"type", "minimum", "maximum"}),
    "integer": frozenset({"type", "minimum", "maximum"}),
    "boolean": frozenset({"type"}),
    "array": frozenset({"type", "items", "minItems", "maxItems"}),
}
_CHOICES_KEYWORDS = frozenset({"type", "enum", "anyOf"})


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _names(value: object) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(v, str) for v in value)
        and len(set(value)) == len(value)
    )


# What the JSON Schema meta-schema says of the values of the keywords a question's schema may
# hold (checked here, not by the meta-schema itself: that takes a millisecond a field).
_VALUES: dict[str, tuple[Any, str]] = {
    "minLength": (_count, "a whole number, 0 or more"),
    "maxLength": (_count, "a whole number, 0 or more"),
    "minItems": (_count, "a whole number, 0 or more"),
    "maxItems": (_count, "a whole number, 0 or more"),
    "minimum": (_number, "a number"),
    "maximum": (_number, "a number"),
    "required": (_names, "a list of distinct field names"),
    "title": (lambda v: isinstance(v, str), "a string"),
    "description": (lambda v: isinstance(v, str), "a string"),
    "$comment": (lambda v: isinstance(v, str), "a string"),
    "$schema": (lambda v: isinstance(v, str), "a string"),
    "contentEncoding": (lambda v: isinstance(v, str), "a string"),
    "contentMediaType": (lambda v: isinstance(v, str), "a string"),
    "deprecated": (lambda v: isinstance(v, bool), "true or false"),
    "readOnly": (lambda v: isinstance(v, bool), "true or false"),
    "writeOnly": (lambda v: isinstance(v, bool), "true or false"),
    "examples": (lambda v: isinstance(v, list), "a list"),
}


def schema_problem(schema: object) -> str | None:
    """Why a question cannot be asked with `schema` as its `requested_schema` (None if it can).

    Accepted: what MCP elicitation allows. `{"type": "object", "properties": {...},
    "required": [...]}` whose fields are each a string (`minLength`, `maxLength`, `format`
    among email, uri, date, date-time, a `pattern` RE2 compiles, and choices: `enum` of
    strings or `oneOf` of `{"const": ...}`), a number or integer (`minimum`, `maximum`), a
    boolean, or an array of choices among strings (`items` with `enum`, or `anyOf` of consts;
    `minItems`, `maxItems`); `title`, `description` and `default` anywhere; no `$ref`; each
    keyword's value as the JSON Schema (2020-12) meta-schema requires; within this module's
    size limits.
    """
    try:
        return _schema_problem(schema)
    except Exception as err:  # not expected; but a check must answer, never raise
        return f"the schema could not be checked ({type(err).__name__})"


def answer_problem(schema: object, content: object) -> str | None:
    """Why `content` is not an answer to a question whose `requested_schema` is `schema` (None
    if it is). A schema `schema_problem` refuses takes no content: only a decline answers it."""
    if (problem := schema_problem(schema)) or not isinstance(schema, Mapping):
        return f"the question's requested_schema takes no answer ({problem}); decline it"
    try:
        return _answer_problem(schema, content)
    except Exception as err:  # e.g. text RE2 cannot read (a lone surrogate): refused, not raised
        return f"the content could not be checked: {cut(str(err)) or type(err).__name__}"


def _schema_problem(schema: object) -> str | None:
    if not isinstance(schema, Mapping):
        return f"a schema is a JSON object, not {kind_of(schema)}"
    if problem := oversized(schema, _SCHEMA_LIMITS):
        return f"the schema is {problem}"
    if problem := _shape_problem(schema):
        return problem
    return _patterns_problem(schema)


def _answer_problem(schema: Mapping[str, Any], content: object) -> str | None:
    if not isinstance(content, Mapping):
        return f"the content is a JSON object, not {kind_of(content)}"
    if problem := oversized(content, _ANSWER_LIMITS):
        return f"the content is {problem}"
    if problem := _matching_problem(schema, content):
        return problem
    validator = _Validator(_plain(schema))
    # The first few errors say enough; finding every one could take a while.
    found = itertools.islice(validator.iter_errors(content), _MAX_ERRORS)
    errors = sorted(found, key=lambda e: list(e.path))
    if not errors:
        return None
    return "; ".join(
        f"{_where(error, '(content)')}: {cut(error.message, _MESSAGE_CHARS)}" for error in errors
    )


def example_answer(schema: object) -> dict[str, Any] | None:
    """An answer to a question asked with `schema`, valid for it, whose values are placeholders
    for a person to replace: each field's default, or its first choice, or a value of its kind
    within its bounds (`"..."`, `0`, `false`); a field no placeholder fits (a pattern `"..."`
    does not match) is left out. None if that field is required, or the schema takes no
    answer."""
    if schema_problem(schema) is not None or not isinstance(schema, Mapping):
        return None
    try:
        return _example_answer(schema)
    except Exception:  # not expected (a bound that is NaN?); but a command to print, never raise
        return None


def _example_answer(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    answer = {}
    for name, field in schema.get("properties", {}).items():
        value = _placeholder(field)
        alone = {"type": "object", "properties": {name: field}}
        if answer_problem(alone, {name: value}) is None:
            answer[name] = value
    if any(name not in answer for name in schema.get("required", [])):
        return None
    return answer if answer_problem(schema, answer) is None else None


def answer_command(run_id: str, question_id: str, schema: object) -> str:
    """The CLI's command that answers a question, as a person pastes it: `--accept` with an
    example answer valid for `schema` (its values to replace), quoted for a POSIX shell; or,
    where no example fits, `--accept` read from a file `answer.json`."""
    command = f"{cli_command()} answer {shlex.quote(run_id)} --question {shlex.quote(question_id)}"
    example = example_answer(schema)
    if example is None:
        return f'{command} --accept "$(cat answer.json)"'
    return f"{command} --accept {shlex.quote(json.dumps(example, separators=(',', ':')))}"


_FORMAT_EXAMPLES = {
    "email": "name@example.com",
    "uri": "https://example.com/",
    "date": "2030-01-31",
    "date-time": "2030-01-31T12:00:00Z",
}


def _placeholder(field: Mapping[str, Any]) -> Any:
    """A value of `field`'s kind, within its bounds: what an example answer holds."""
    if "default" in field:
        return field["default"]
    kind = field.get("type")
    if kind == "boolean":
        return False
    if kind in ("number", "integer"):
        low, high = field.get("minimum"), field.get("maximum")
        value = low if low is not None else min(high, 0) if high is not None else 0
        return math.ceil(value) if kind == "integer" else value
    if kind == "array":
        choices = _choices(field.get("items", {}))
        return choices[: max(field.get("minItems", 0), 1 if choices else 0)]
    if choices := _choices(field):
        return choices[0]
    if isinstance(format_ := field.get("format"), str) and format_ in _FORMAT_EXAMPLES:
        return _FORMAT_EXAMPLES[format_]
    length = max(3, field.get("minLength", 0))
    return ("." * length)[: field.get("maxLength", length)]


def _choices(field: Mapping[str, Any]) -> list[str]:
    """A field's (or a multi-select's items') choices, in their order."""
    if isinstance(enum := field.get("enum"), list):
        return [choice for choice in enum if isinstance(choice, str)]
    consts = field.get("oneOf", field.get("anyOf", []))
    return [option["const"] for option in consts if isinstance(option, Mapping)]


# --- the shape ---------------------------------------------------------------------------------


def _shape_problem(schema: Mapping[str, Any]) -> str | None:
    if problem := _reference_problem(schema, _ROOT):
        return problem
    if schema.get("type") != "object":
        kind = quote(schema.get("type"))
        return f'the schema\'s type must be "object" (a form of fields), not {kind}'
    if problem := _keywords_problem(schema, _ROOT_KEYWORDS, _ROOT):
        return problem
    if not isinstance(schema.get("additionalProperties", True), bool):
        return "additionalProperties must be true or false (fields are declared in properties)"
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return f"properties must be an object of fields, not {kind_of(properties)}"
    if len(properties) > MAX_PROPERTIES:
        return f"the schema has {len(properties)} fields; at most {MAX_PROPERTIES} are allowed"
    for name, field in properties.items():
        if problem := _field_problem(field, f"properties.{name}"):
            return problem
    return None


def _field_problem(field: object, where: str) -> str | None:
    if not isinstance(field, Mapping):
        return f"{where} must be an object describing a field, not {kind_of(field)}"
    if problem := _reference_problem(field, where):
        return problem
    kind = field.get("type")
    allowed = _FIELD_KEYWORDS.get(kind) if isinstance(kind, str) else None
    if allowed is None:
        kinds = ", ".join(_FIELD_KEYWORDS)
        return f"{where}.type must be one of {kinds} (fields are not nested), not {quote(kind)}"
    if problem := _keywords_problem(field, allowed, where):
        return problem
    if kind == "string":
        return _string_problem(field, where)
    if kind == "array":
        return _choices_problem(field.get("items"), f"{where}.items")
    return None


def _string_problem(field: Mapping[str, Any], where: str) -> str | None:
    format_ = field.get("format")
    if format_ is not None and format_ not in STRING_FORMATS:
        formats = ", ".join(sorted(STRING_FORMATS))
        return f"{where}.format must be one of {formats}, not {quote(format_)}"
    pattern = field.get("pattern")
    if pattern is not None and not isinstance(pattern, str):
        return f"{where}.pattern must be a string, not {kind_of(pattern)}"
    if pattern is not None and len(pattern) > MAX_PATTERN_CHARS:
        return f"{where}.pattern is over {MAX_PATTERN_CHARS} characters"
    return _listed_choices_problem(field, "oneOf", where)


def _choices_problem(items: object, where: str) -> str | None:
    """A multi-select's items: strings from an `enum`, or from an `anyOf` of consts."""
    if not isinstance(items, Mapping):
        return f'{where} must be an object of choices ({{"type": "string", "enum": [...]}})'
    if problem := _reference_problem(items, where):
        return problem
    if problem := _keywords_problem(items, _CHOICES_KEYWORDS, where):
        return problem
    if items.get("type", "string") != "string":
        return f'{where}.type must be "string", not {quote(items.get("type"))}'
    if "enum" not in items and "anyOf" not in items:
        return f"{where} must list its choices (enum, or anyOf of consts)"
    return _listed_choices_problem(items, "anyOf", where)


def _listed_choices_problem(choices: Mapping[str, Any], consts: str, where: str) -> str | None:
    """Choices listed once: as an `enum` of strings, or as a list of consts under `consts`
    (`oneOf` for a single select, `anyOf` for a multi-select's items), not both."""
    if "enum" in choices and consts in choices:
        return f"{where}: enum and {consts} are two lists of choices; give one"
    if "enum" in choices:
        return _options_problem(choices["enum"], f"{where}.enum")
    if consts in choices:
        return _consts_problem(choices[consts], f"{where}.{consts}")
    return None


def _options_problem(options: object, where: str) -> str | None:
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        return f"{where} must be a list of strings"
    if len(options) > MAX_OPTIONS:
        return f"{where} has {len(options)} choices; at most {MAX_OPTIONS} are allowed"
    return None


def _consts_problem(options: object, where: str) -> str | None:
    if not isinstance(options, list):
        return f'{where} must be a list of choices ({{"const": "...", "title": "..."}})'
    if len(options) > MAX_OPTIONS:
        return f"{where} has {len(options)} choices; at most {MAX_OPTIONS} are allowed"
    seen: set[str] = set()
    for i, option in enumerate(options):
        if not isinstance(option, Mapping) or not isinstance(option.get("const"), str):
            return f'{where}[{i}] must be a choice {{"const": "...", "title": "..."}}'
        if problem := _keywords_problem(option, frozenset({"const"}), f"{where}[{i}]"):
            return problem
        if option["const"] in seen:
            return f"{where} offers {quote(option['const'])} twice"
        seen.add(option["const"])
    return None


def _reference_problem(schema: Mapping[str, Any], where: str) -> str | None:
    refused = sorted(k for k in schema if k in _REFERENCE_KEYWORDS)
    if not refused:
        return None
    return f"{where}: {', '.join(refused)} not allowed (a question's schema is self-contained)"


def _keywords_problem(schema: Mapping[str, Any], allowed: frozenset[str], where: str) -> str | None:
    """A keyword the location does not allow, or a value the meta-schema does not."""
    refused = sorted(k for k in schema if k in _JSON_SCHEMA_KEYWORDS and k not in allowed)
    if refused:
        return (
            f"{where}: {', '.join(refused)} not allowed (not in the shape MCP elicitation allows)"
        )
    for keyword, value in schema.items():
        valid, what = _VALUES.get(keyword, (None, ""))
        if valid is not None and not valid(value):
            at = keyword if where == _ROOT else f"{where}.{keyword}"
            return f"{at} must be {what}, not {quote(value)}"
    return None


# --- patterns ----------------------------------------------------------------------------------


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is said in the refusal, not on stderr
    # Per pattern: its program and its matching state (RE2 keeps up to 128 patterns compiled).
    options.max_mem = 1 << 20
    return options


_RE2_OPTIONS = _re2_options()


def _compiled(pattern: str) -> Any:
    """`pattern` compiled by RE2, which matches in time linear in the text: no backtracking.

    Raises:
        re2.error: RE2 cannot compile it (lookaround, backreferences, too large).
    """
    return re2.compile(pattern, _RE2_OPTIONS)


def _patterns_problem(schema: Mapping[str, Any]) -> str | None:
    """A pattern RE2 does not compile, or patterns too large together."""
    program = 0
    for name, field in schema.get("properties", {}).items():
        pattern = field.get("pattern")
        if pattern is None:
            continue
        try:
            program += _compiled(pattern).programsize
        except Exception as err:
            return (
                f"properties.{name}.pattern {quote(pattern)} is not a pattern RE2 accepts "
                f"({_re2_error(err)}): patterns are matched in linear time, without lookaround "
                "or backreferences"
            )
        if program > MAX_PATTERN_PROGRAM:
            return f"properties.{name}.pattern: the schema's patterns are too large together"
    return None


def _matching_problem(schema: Mapping[str, Any], content: Mapping[str, Any]) -> str | None:
    """A string too long for the work its field's pattern may cost (text x program)."""
    cost = 0
    for name, field in schema.get("properties", {}).items():
        value, pattern = content.get(name), field.get("pattern")
        if isinstance(value, str) and pattern is not None:
            cost += len(value) * _compiled(pattern).programsize
            if cost > MATCH_BUDGET:
                return f"{name}: too long ({len(value)} characters) to match against its pattern"
    return None


def _pattern(
    validator: Any, pattern: str, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """The `pattern` keyword, matched by RE2 instead of Python's `re`."""
    if validator.is_type(instance, "string") and _compiled(pattern).search(instance) is None:
        yield ValidationError(f"{quote(instance)} does not match {pattern!r}")


def _enum(
    validator: Any, enum: list[str], instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """The `enum` keyword over a checked schema's choices (strings only): one membership test,
    not a comparison a choice."""
    if not (isinstance(instance, str) and instance in enum):
        yield ValidationError(f"{quote(instance)} is not one of {quote(enum)}")


_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, validators={"pattern": _pattern, "enum": _enum}
)


def _plain(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with its choices of consts as enums: the same answers valid (the consts of a
    `oneOf` are distinct), checked in one comparison each instead of a subschema each."""
    properties = {}
    for name, field in schema.get("properties", {}).items():
        plain = dict(field)
        if "oneOf" in plain:
            plain["enum"] = [option["const"] for option in plain.pop("oneOf")]
        items = plain.get("items")
        if isinstance(items, Mapping) and "anyOf" in items:
            plain["items"] = {"type": "string", "enum": [o["const"] for o in items["anyOf"]]}
        properties[name] = plain
    return {**schema, "properties": properties}


def _re2_error(err: Exception) -> str:
    detail = err.args[0] if err.args else type(err).__name__
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    return cut(str(detail))


def _where(error: ValidationError, default: str) -> str:
    return ".".join(str(part) for part in error.absolute_path) or default
