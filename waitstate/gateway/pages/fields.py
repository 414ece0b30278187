"""A question's form: its fields, built from the schema its answer must fit (the shape MCP
elicitation allows: a flat object of strings, numbers, booleans and choices among strings), and
the fields read back as the answer's typed content.

The run checks the content against the schema (`waitstate.elicitation.answer_problem`): the
form only helps a person fill it in, and reads what they sent as the schema's types say, so
the run's refusal is the one that names what is wrong.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from waitstate.gateway.pages.html import Html, join, render

# A field's name in the form: the property's, after this prefix (the form's own names, as
# `token`, never clash with a property's).
FIELD_PREFIX = "field:"
# What a form's text field is read as a number from: longer text is sent as it is (the run
# refuses it as not a number).
_MAX_NUMBER_CHARS = 100
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Strings that may be longer than this are asked in a box of several lines.
_LONG_TEXT = 200
_INPUT_TYPES = {"email": "email", "uri": "url", "date": "date"}


def fields(schema: Mapping[str, Any], values: Mapping[str, Any] | None = None) -> Html:
    """The form's fields for a question's `requested_schema`, one a property, holding `values`
    (by property name) or else each property's `default`.

    A string is a text box (an email, URL or date box for those formats; several lines if it
    may be over 200 characters), or a list to choose from (`enum`, `oneOf` of consts); a number or an integer
    a number box within its `minimum` and `maximum`; a boolean a checkbox; an array of choices
    a checkbox each. A required field is marked, and its box says so to the browser.
    """
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return Html("")
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    parts = []
    for index, (name, field) in enumerate(properties.items()):
        if not isinstance(field, Mapping):
            continue
        value = values.get(name) if values is not None else field.get("default")
        parts.append(_field(f"field-{index}", str(name), field, name in needed, value))
    return join(parts)


def content_from(schema: Mapping[str, Any], form: Mapping[str, list[str]]) -> dict[str, Any]:
    """The answer's content from the form's fields, typed as `schema`'s properties say: an
    empty box is left out (the run says if it was required), a number box's text is a number
    (as it was typed, if it is not one, for the run to refuse), an unchecked checkbox `false`,
    the checked choices of an array a list."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    content: dict[str, Any] = {}
    for name, field in properties.items():
        if not isinstance(field, Mapping):
            continue
        sent = form.get(FIELD_PREFIX + str(name), [])
        kind = field.get("type")
        if kind == "boolean":
            content[name] = bool(sent) and sent[0] == "true"
        elif kind == "array":
            if sent:
                content[name] = list(sent)
        elif sent and sent[0] != "":
            content[name] = _number(sent[0]) if kind in ("number", "integer") else sent[0]
    return content


def _number(typed: str) -> Any:
    """A number box's text as JSON's number, or as it was typed if it is none (or not finite,
    which JSON cannot keep)."""
    shown = typed.strip()
    if len(shown) > _MAX_NUMBER_CHARS:
        return typed
    if _INTEGER.fullmatch(shown):
        return int(shown)
    try:
        number = float(shown)
    except ValueError:
        return typed
    return number if math.isfinite(number) else typed


def _field(field_id: str, name: str, field: Mapping[str, Any], required: bool, value: Any) -> Html:
    kind = field.get("type")
    label = field.get("title") if isinstance(field.get("title"), str) else name
    hint = field.get("description")
    hint_html = (
        render('<p class="hint" id="$id-hint">$hint</p>', id=field_id, hint=hint)
        if isinstance(hint, str) and hint
        else Html("")
    )
    mark = Html(' <span class="required" title="required">*</span>') if required else Html("")
    if kind == "boolean":
        return render(
            '<div class="field"><label class="choice"><input type="checkbox" id="$id" '
            'name="$name" value="true"$checked>$label$mark</label>$hint</div>',
            id=field_id,
            name=FIELD_PREFIX + name,
            checked=Html(" checked") if value is True else Html(""),
            label=label,
            mark=mark,
            hint=hint_html,
        )
    if kind == "array":
        chosen = set(value) if isinstance(value, list) else set()
        items = field.get("items")
        options = _choices(items if isinstance(items, Mapping) else {}, "anyOf")
        boxes = join(
            [
                render(
                    '<label class="choice"><input type="checkbox" name="$name" value="$value"'
                    "$checked>$title</label>",
                    name=FIELD_PREFIX + name,
                    value=option,
                    checked=Html(" checked") if option in chosen else Html(""),
                    title=title,
                )
                for option, title in options
            ]
        )
        return render(
            '<fieldset class="field"><legend>$label$mark</legend>$boxes$hint</fieldset>',
            label=label,
            mark=mark,
            boxes=boxes,
            hint=hint_html,
        )
    attributes = _attributes(field, required)
    if hint_html:
        attributes = Html(attributes + render(' aria-describedby="$id-hint"', id=field_id))
    label_html = render('<label for="$id">$label$mark</label>', id=field_id, label=label, mark=mark)
    shown = "" if value is None or isinstance(value, bool | list | dict) else str(value)
    # What every kind of box says of itself: which field it is, and its checks.
    box_of = {"id": field_id, "name": FIELD_PREFIX + name, "attributes": attributes}
    if kind == "string" and ("enum" in field or "oneOf" in field):
        options = _choices(field, "oneOf")
        listed = join(
            [Html('<option value="">Choose...</option>')]
            + [
                render(
                    '<option value="$value"$selected>$title</option>',
                    value=option,
                    selected=Html(" selected") if option == shown else Html(""),
                    title=title,
                )
                for option, title in options
            ]
        )
        box = render(
            '<select id="$id" name="$name"$attributes>$options</select>', **box_of, options=listed
        )
    elif kind == "string" and _long(field):
        box = render(
            '<textarea id="$id" name="$name" rows="4"$attributes>$value</textarea>',
            **box_of,
            value=shown,
        )
    else:
        box = render(
            '<input id="$id" name="$name" type="$type"$attributes value="$value">',
            **box_of,
            type=_input_type(field),
            value=shown,
        )
    return render(
        '<div class="field">$label$box$hint</div>', label=label_html, box=box, hint=hint_html
    )


def _choices(field: Mapping[str, Any], consts: str) -> list[tuple[str, str]]:
    """A field's choices, (value, what it is called): an `enum` (named by `enumNames` if it
    has them), or a list of `{"const": ..., "title": ...}` under `consts`."""
    enum = field.get("enum")
    if isinstance(enum, list):
        names = field.get("enumNames")
        titles = names if isinstance(names, list) and len(names) == len(enum) else enum
        return [(str(value), str(title)) for value, title in zip(enum, titles, strict=True)]
    listed = field.get(consts)
    if not isinstance(listed, list):
        return []
    return [
        (str(option["const"]), str(option.get("title") or option["const"]))
        for option in listed
        if isinstance(option, Mapping) and "const" in option
    ]


def _attributes(field: Mapping[str, Any], required: bool) -> Html:
    """A box's constraints the browser checks before sending (the run checks them again)."""
    wanted: list[tuple[str, object]] = []
    if required:
        wanted.append(("required", None))
    kind = field.get("type")
    if kind in ("number", "integer"):
        wanted.append(("step", "1" if kind == "integer" else "any"))
        wanted.extend(
            (bound[:3], field[bound]) for bound in ("minimum", "maximum") if bound in field
        )
    if kind == "string":
        wanted.extend(
            (bound.lower(), field[bound]) for bound in ("minLength", "maxLength") if bound in field
        )
        if field.get("format") == "date-time":
            wanted.append(("placeholder", "2025-01-31T09:00:00Z"))
    return Html(
        "".join(
            f" {name}" if value is None else render(' $name="$value"', name=name, value=value)
            for name, value in wanted
        )
    )


def _input_type(field: Mapping[str, Any]) -> str:
    if field.get("type") in ("number", "integer"):
        return "number"
    format_ = field.get("format")
    return _INPUT_TYPES.get(format_, "text") if isinstance(format_, str) else "text"


def _long(field: Mapping[str, Any]) -> bool:
    if field.get("format") is not None:
        return False
    bound = field.get("maxLength")
    return isinstance(bound, int) and bound > _LONG_TEXT
