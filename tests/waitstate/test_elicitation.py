"""A job's question and a link holder's answer, checked without Temporal: the schemas MCP
elicitation allows are taken, every other is refused with a sentence saying why, and hostile
schemas and answers are refused (or checked) in bounded time, never raising: by their limits,
and with their patterns matched by RE2 alone."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.upstream import jsonschema_says
from waitstate.elicitation import (
    MAX_ANSWER_CHARS,
    MAX_OPTIONS,
    MAX_PATTERN_CHARS,
    MAX_PROPERTIES,
    answer_command,
    answer_problem,
    example_answer,
    schema_problem,
)
from waitstate.names import cli_command

# The issue's crafted answer: Python's `re` backtracks on it for minutes.
HOSTILE_PATTERN = "^(a+)+$"
HOSTILE_ANSWER = "a" * 30 + "!"


def form(**fields: Any) -> dict[str, Any]:
    return {"type": "object", "properties": fields}


def _patterns(schema: Any) -> set[str]:
    """Every pattern a schema holds (`pattern`, and `patternProperties`' keys), however deep."""
    found: set[str] = set()
    waiting = [schema]
    while waiting:  # not recursive: some schemas here nest a hundred thousand deep
        value = waiting.pop()
        if isinstance(value, list):
            waiting.extend(value)
        elif isinstance(value, dict):
            if isinstance(value.get("pattern"), str):
                found.add(value["pattern"])
            if isinstance(value.get("patternProperties"), dict):
                found |= {str(key) for key in value["patternProperties"]}
            waiting.extend(value.values())
    return found


def checked(check: Callable[..., str | None], schema: Any, *answer: Any) -> str | None:
    """`check`'s verdict on `schema` (and `answer`), none of the schema's patterns compiled by
    Python's `re` meanwhile: it backtracks (minutes on the hostile pattern), RE2 does not.

    What bounds a check's time is said by what it records, not by a stopwatch (which a loaded
    machine fools): patterns go to RE2 alone, sizes are refused by their limits (the refusals
    say which)."""
    compiled: list[str] = []
    compile_ = re._compile  # type: ignore[attr-defined]  # every function of `re` goes through it

    def spied(pattern: Any, flags: Any) -> Any:
        compiled.append(str(getattr(pattern, "pattern", pattern)))
        return compile_(pattern, flags)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(re, "_compile", spied)
        problem = check(schema, *answer)
    assert not _patterns(schema) & set(compiled), (check.__name__, problem, compiled)
    return problem


# --- schemas ------------------------------------------------------------------------------------

ACCEPTED = {
    "the default": form(),
    "a confirmation": {
        "type": "object",
        "properties": {"confirm": {"type": "boolean", "description": "true to delete"}},
        "required": ["confirm"],
    },
    "a choice": form(channel={"type": "string", "enum": ["email", "slack"]}),
    "a titled choice": form(
        size={"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l"}]}
    ),
    "a multi-select": form(
        tags={"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 2}
    ),
    "a titled multi-select": form(
        tags={"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}]}, "minItems": 1}
    ),
    "strings and numbers": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Contact",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "email": {"type": "string", "format": "email", "maxLength": 200},
            "name": {"type": "string", "minLength": 1, "pattern": "^[A-Za-z .'-]+$"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 30},
            "score": {"type": "number", "minimum": 0.5},
            "legacy": {"type": "string", "enum": ["a"], "enumNames": ["A"], "x-order": 3},
        },
        "required": ["email"],
    },
    "a backtracking pattern (RE2 matches it in linear time)": form(
        name={"type": "string", "pattern": HOSTILE_PATTERN}
    ),
}


@pytest.mark.parametrize("schema", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_the_schemas_mcp_elicitation_allows_are_taken(schema: dict[str, Any]) -> None:
    assert checked(schema_problem, schema) is None


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    inner = schema
    for _ in range(levels):
        inner["properties"] = {"a": {}}
        inner = inner["properties"]["a"]
    return schema


REFUSED: dict[str, tuple[Any, str]] = {
    "a type that is no type": ({"type": 12}, 'type must be "object"'),
    "a dangling $ref": (
        form(a={"$ref": "#/$defs/missing"}),
        "properties.a: $ref not allowed (a question's schema is self-contained)",
    ),
    "a remote $ref": (
        {"$ref": "https://schemas.example/answer.json"},
        "the schema: $ref not allowed",
    ),
    "definitions": ({"type": "object", "$defs": {"x": {}}}, "$defs not allowed"),
    "a string root": (
        {"type": "string"},
        "type must be \"object\" (a form of fields), not 'string'",
    ),
    "a list": ([{"type": "object"}], "a schema is a JSON object, not a list"),
    "text": ("{}", "a schema is a JSON object, not a string"),
    "a nested object": (
        form(address={"type": "object", "properties": {"city": {"type": "string"}}}),
        "properties.address.type must be one of string, number, integer, boolean, array",
    ),
    "a field without a type": (form(a={"enum": ["x"]}), "properties.a.type must be one of"),
    "a union type": (form(a={"type": ["string", "null"]}), "properties.a.type must be one of"),
    "allOf": ({"type": "object", "allOf": [{}]}, "the schema: allOf not allowed"),
    "patternProperties": (
        {"type": "object", "patternProperties": {HOSTILE_PATTERN: {}}},
        "patternProperties not allowed",
    ),
    "a schema for extra fields": (
        {"type": "object", "additionalProperties": {"type": "string"}},
        "additionalProperties must be true or false",
    ),
    "uniqueItems": (
        form(a={"type": "array", "items": {"enum": ["x"]}, "uniqueItems": True}),
        "properties.a: uniqueItems not allowed",
    ),
    "format regex": (
        form(a={"type": "string", "format": "regex"}),
        "properties.a.format must be one of date, date-time, email, uri, not 'regex'",
    ),
    "a lookahead": (
        form(a={"type": "string", "pattern": "^(?=a)a$"}),
        "properties.a.pattern '^(?=a)a$' is not a pattern RE2 accepts",
    ),
    "a backreference": (
        form(a={"type": "string", "pattern": r"(a)\1"}),
        "is not a pattern RE2 accepts",
    ),
    "a pattern that is not text": (form(a={"type": "string", "pattern": 5}), "must be a string"),
    "a long pattern": (
        form(a={"type": "string", "pattern": "a" * (MAX_PATTERN_CHARS + 1)}),
        f"over {MAX_PATTERN_CHARS} characters",
    ),
    "patterns too large together": (
        form(**{f"f{i}": {"type": "string", "pattern": f"(.*a){{{900 - i}}}"} for i in range(20)}),
        "the schema's patterns are too large together",
    ),
    "a negative length": (
        form(a={"type": "string", "minLength": -1}),
        "properties.a.minLength must be a whole number, 0 or more, not -1",
    ),
    "required names that are not names": (
        {"type": "object", "required": [1, 1]},
        "required must be a list of distinct field names",
    ),
    "a title that is not text": ({"type": "object", "title": 5}, "title must be a string"),
    "choices that are not text": (
        form(a={"type": "string", "enum": [1, 2]}),
        "properties.a.enum must be a list of strings",
    ),
    "the same choice twice": (
        form(a={"type": "string", "oneOf": [{"const": "x"}, {"const": "x"}]}),
        "properties.a.oneOf offers 'x' twice",
    ),
    "two lists of choices": (
        form(a={"type": "string", "enum": ["x"], "oneOf": [{"const": "x"}]}),
        "enum and oneOf are two lists of choices",
    ),
    "a choice that is a schema": (
        form(a={"type": "string", "oneOf": [{"const": "x", "pattern": "x"}]}),
        "properties.a.oneOf[0]: pattern not allowed",
    ),
    "items of another kind": (
        form(a={"type": "array", "items": {"type": "integer"}}),
        'properties.a.items.type must be "string"',
    ),
    "items without choices": (
        form(a={"type": "array", "items": {"type": "string"}}),
        "properties.a.items must list its choices",
    ),
    "too many fields": (
        form(**{f"f{i}": {"type": "boolean"} for i in range(MAX_PROPERTIES + 1)}),
        f"at most {MAX_PROPERTIES} are allowed",
    ),
    "too many choices": (
        form(a={"type": "string", "enum": [str(i) for i in range(MAX_OPTIONS + 1)]}),
        f"at most {MAX_OPTIONS} are allowed",
    ),
    "nested a hundred thousand deep": (_deep(100_000), "nested deeper than 8 levels"),
    "a megabyte of description": (
        {"type": "object", "description": "x" * 1_000_000},
        "the schema is over 64000 characters",
    ),
    "a million fields' worth of keys": (
        {"type": "object", "properties": {str(i): {} for i in range(1_000_000)}},
        "the schema is over 20000 values",
    ),
    "a number that is not finite": (
        form(a={"type": "number", "maximum": float("inf")}),
        "holding a number that is not finite",
    ),
    "an integer of a thousand digits": (
        form(a={"type": "integer", "maximum": 10**1000}),
        "holding an integer beyond 64 bits",
    ),
}


@pytest.mark.parametrize(("schema", "says"), REFUSED.values(), ids=REFUSED.keys())
def test_every_other_schema_is_refused_saying_why_in_bounded_time(schema: Any, says: str) -> None:
    problem = checked(schema_problem, schema)

    assert problem is not None and says in problem, problem


# --- answers ------------------------------------------------------------------------------------

CONFIRM = ACCEPTED["a confirmation"]
CHOICE = ACCEPTED["a choice"]
HOSTILE = form(name={"type": "string", "pattern": HOSTILE_PATTERN})


def test_the_crafted_answer_is_refused_at_once_and_a_matching_one_taken() -> None:
    refused = checked(answer_problem, HOSTILE, {"name": HOSTILE_ANSWER})
    long_refused = checked(answer_problem, HOSTILE, {"name": "a" * (MAX_ANSWER_CHARS - 100) + "!"})

    # Patterns are matched by our RE2, and refused in our words (`elicitation._pattern`).
    assert refused == f"name: {HOSTILE_ANSWER!r} does not match {HOSTILE_PATTERN!r}"
    assert long_refused is not None and long_refused.startswith("name: 'aaaa")
    assert long_refused.endswith(f"does not match {HOSTILE_PATTERN!r}")
    assert checked(answer_problem, HOSTILE, {"name": "a" * 30}) is None


def stock(schema: dict[str, Any], content: dict[str, Any], where: str, keyword: str) -> Any:
    """A case of `test_answers_are_checked_against_their_schema` refused by a keyword jsonschema
    checks: the field's path (`(content)` for the whole) is ours to say, why is jsonschema's."""
    return (schema, content, f"{where}: {jsonschema_says(schema, content, keyword)}")


@pytest.mark.parametrize(
    ("schema", "content", "says"),
    [
        stock(CONFIRM, {"confirm": "yes"}, "confirm", "type"),
        stock(CONFIRM, {}, "(content)", "required"),
        # Choices are ours to check (one membership test, `elicitation._enum`), and to word.
        (CHOICE, {"channel": "fax"}, "channel: 'fax' is not one of ['email', 'slack']"),
        (ACCEPTED["a titled choice"], {"size": "m"}, "size: 'm' is not one of ['s', 'l']"),
        stock(ACCEPTED["a titled multi-select"], {"tags": []}, "tags", "minItems"),
        (ACCEPTED["a multi-select"], {"tags": ["a", "c"]}, "tags.1: 'c' is not one of"),
        stock(ACCEPTED["strings and numbers"], {"email": "e", "age": -1}, "age", "minimum"),
        stock(
            ACCEPTED["strings and numbers"],
            {"email": "e", "x": 1},
            "(content)",
            "additionalProperties",
        ),
    ],
)
def test_answers_are_checked_against_their_schema(
    schema: dict[str, Any], content: dict[str, Any], says: str
) -> None:
    problem = checked(answer_problem, schema, content)

    assert problem is not None and says in problem, problem


def test_answers_that_fit_are_taken() -> None:
    assert answer_problem(CONFIRM, {"confirm": True}) is None
    assert answer_problem(ACCEPTED["a titled choice"], {"size": "l"}) is None
    assert answer_problem(ACCEPTED["a titled multi-select"], {"tags": ["a"]}) is None
    full = {"email": "a@b.c", "name": "Ana O'Neil", "age": 40, "score": 1.5, "legacy": "a"}
    assert answer_problem(ACCEPTED["strings and numbers"], full) is None


MANY_CHOICES = form(
    tags={"type": "array", "items": {"anyOf": [{"const": f"c{i}"} for i in range(MAX_OPTIONS)]}}
)
HOSTILE_ANSWERS: dict[str, tuple[dict[str, Any], Any, str]] = {
    "not an object": (CONFIRM, ["confirm"], "the content is a JSON object, not a list"),
    "too large": (CHOICE, {"channel": "x" * 100_000}, f"over {MAX_ANSWER_CHARS} characters"),
    "nested deep": (CHOICE, {"channel": [[[["x"]]]]}, "nested deeper than 4 levels"),
    "a long list": (MANY_CHOICES, {"tags": ["zz"] * 100_000}, "over 1000 values"),
    "a list just within bounds": (MANY_CHOICES, {"tags": ["zz"] * 990}, "'zz' is not one of"),
    "a lone surrogate": (HOSTILE, {"name": "\ud800"}, "the content could not be checked"),
    "a huge integer": (CONFIRM, {"confirm": 10**5000}, "holding an integer beyond 64 bits"),
    "text too long for its pattern": (
        form(a={"type": "string", "pattern": "(.*a){500}"}),
        {"a": "a" * 30_000},
        "a: too long (30000 characters) to match against its pattern",
    ),
}


@pytest.mark.parametrize(
    ("schema", "content", "says"), HOSTILE_ANSWERS.values(), ids=HOSTILE_ANSWERS.keys()
)
def test_hostile_answers_are_refused_in_bounded_time(
    schema: dict[str, Any], content: Any, says: str
) -> None:
    problem = checked(answer_problem, schema, content)

    assert problem is not None and says in problem, problem


@pytest.mark.parametrize(
    "schema", [{"type": 12}, form(a={"$ref": "#/nope"}), {"type": "object", "allOf": [1]}]
)
def test_a_schema_that_takes_no_answer_is_answered_by_a_decline_only(schema: Any) -> None:
    problem = answer_problem(schema, {"a": 1})

    assert problem is not None
    assert problem.startswith("the question's requested_schema takes no answer (")
    assert problem.endswith("); decline it")


# JSON values of every kind, nested a little: whatever a job or a link holder sends.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_KEYWORDS = st.sampled_from(
    ["type", "properties", "required", "pattern", "enum", "oneOf", "items", "anyOf", "$ref"]
)
_SCHEMAS = st.recursive(
    _JSON, lambda inner: st.dictionaries(_KEYWORDS | st.text(max_size=8), inner), max_leaves=30
)


@settings(max_examples=100, deadline=None)
@given(schema=_SCHEMAS, content=_JSON)
def test_nothing_a_job_or_a_link_holder_sends_makes_a_check_raise(
    schema: Any, content: Any
) -> None:
    problem = schema_problem(schema)
    answered = answer_problem(schema, content)

    assert problem is None or isinstance(problem, str)
    assert isinstance(answered, str) or (problem is None and answered is None)
    json.dumps(answered)  # a sentence, whatever it quotes


# --- the answer a person is shown how to give --------------------------------------------------


FORM = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "enum": ["EMEA", "APAC"]},
        "plan": {"type": "string", "oneOf": [{"const": "basic"}, {"const": "pro"}]},
        "confirm": {"type": "boolean"},
        "rows": {"type": "integer", "minimum": 1.5, "maximum": 10},
        "ratio": {"type": "number", "maximum": -2},
        "contact": {"type": "string", "format": "email"},
        "day": {"type": "string", "format": "date"},
        "tags": {
            "type": "array",
            "items": {"anyOf": [{"const": "a"}, {"const": "b"}]},
            "minItems": 2,
        },
        "name": {"type": "string", "minLength": 5, "maxLength": 8},
        "note": {"type": "string", "default": "it's fine"},
    },
    "required": ["region", "rows"],
}


def test_an_example_answer_is_valid_for_its_schema_each_value_a_placeholder() -> None:
    example = example_answer(FORM)

    assert example is not None and answer_problem(FORM, example) is None
    assert example == {
        "region": "EMEA",
        "plan": "basic",
        "confirm": False,
        "rows": 2,
        "ratio": -2,
        "contact": "name@example.com",
        "day": "2030-01-31",
        "tags": ["a", "b"],
        "name": ".....",
        "note": "it's fine",
    }


def test_an_example_answer_leaves_out_an_optional_field_no_placeholder_fits() -> None:
    code = {"type": "string", "pattern": "^[A-Z]{3}$"}
    optional = {"type": "object", "properties": {"code": code, "ok": {"type": "boolean"}}}
    required = {**optional, "required": ["code"]}

    assert example_answer(optional) == {"ok": False}
    assert example_answer(required) is None
    assert example_answer({"type": "array"}) is None  # a schema no question may ask
    # A bound Python's JSON reads from a job's `NaN`: no example, and no exception.
    nan = {"type": "object", "properties": {"n": {"type": "integer", "minimum": float("nan")}}}
    assert example_answer(nan) is None


@pytest.mark.parametrize(
    ("schema", "accept"),
    [
        (FORM, None),
        (
            {
                "type": "object",
                "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
                "required": ["code"],
            },
            '"$(cat answer.json)"',
        ),
    ],
)
def test_the_answer_command_works_as_pasted_into_a_shell(
    schema: dict[str, Any], accept: str | None
) -> None:
    command = answer_command("run 1; rm -rf ~", "q_1", schema)

    words = shlex.split(command)
    assert words[:6] == [
        cli_command(),
        "answer",
        "run 1; rm -rf ~",
        "--question",
        "q_1",
        "--accept",
    ]
    if accept is None:
        assert answer_problem(schema, json.loads(words[6])) is None
    else:
        assert command.endswith(f" --accept {accept}")
