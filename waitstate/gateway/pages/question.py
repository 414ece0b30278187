"""The question page: what an operation's job asks, with a form built from the schema its answer
must fit (the shape MCP elicitation allows: a flat object of strings, numbers, booleans and
choices among strings) while it is open, or what became of it; and the form's fields read back
as the answer's typed content.

The run checks the content against the schema (`waitstate.elicitation.answer_problem`): the
form only helps a person fill it in, and reads what they sent as the schema's types say, so
the run's refusal is the one that names what is wrong.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from waitstate.gateway.pages.html import (
    FormTarget,
    Html,
    banner,
    details,
    document,
    join,
    render,
    text,
    when,
)
from waitstate.schemas.questions import AnswerOutcome, InputRequest
from waitstate.schemas.run import TERMINAL_STATUSES

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

_QUESTION = """$details
<h2>Question</h2>
<div class="text message">$message</div>"""

_FORM = """<form method="post" action="$action" accept-charset="utf-8">
$hidden
$error
$fields
<div class="field"><label for="responder">Your name</label>
<input id="responder" name="responder" maxlength="200" required autocomplete="name"
 value="$responder"></div>
<div class="buttons">
<button type="submit" name="action" value="accept" class="yes">Accept</button>
<button type="submit" name="action" value="decline" class="no" formnovalidate>Decline</button>
</div>
</form>"""

_STATES = {
    "answered": "Answered",
    "declined": "Declined",
}


def answerable(question: InputRequest, run_status: str) -> bool:
    """Whether a person may still answer: the question is open, and its run goes on."""
    return question.open and run_status not in TERMINAL_STATUSES


def title_of(question: InputRequest, run_status: str) -> str:
    """What a page that shows the question as it is now calls it."""
    if answerable(question, run_status):
        return "A question for you"
    return f"Question: {'closed' if question.open else question.status}"


def page(
    *,
    title: str,
    workflow_id: str,
    question_id: str,
    question: InputRequest | None,
    run_status: str,
    news: Html | None = None,
    form: FormTarget | None = None,
    values: Mapping[str, Any] | None = None,
    responder: str = "",
) -> str:
    """A page about the question `question_id` of the run `workflow_id`.

    Args:
        title: Its title and heading.
        workflow_id: The run.
        question_id: The question.
        question: The question as the run has it now (None: the run could not say).
        run_status: The run's status (`RunState.status`).
        news: What happened, on top; without it, the page says what became of a question
            that is no longer open. Shown in the form if the form is shown (an answer the
            run refused: the person corrects it).
        form: Where the form to answer is sent; shown only while a person may answer.
        values: What the form's fields hold (an answer the run refused); the schema's
            defaults otherwise.
        responder: What the form's name field holds.
    """
    parts: list[Html] = []
    open_form = form if question is not None and answerable(question, run_status) else None
    if open_form is None:
        if news is not None:
            parts.append(news)
        elif question is not None:
            parts.append(state(question, run_status))
    if question is None:
        parts.append(details([("Run", workflow_id), ("Question", question_id)]))
    else:
        parts.append(_question(workflow_id, question))
    if open_form is not None and question is not None:
        parts.append(
            render(
                _FORM,
                action=open_form.action,
                hidden=open_form.hidden(),
                error=news if news is not None else Html(""),
                fields=fields(question.requested_schema, values),
                responder=responder,
            )
        )
    return document(title, join(parts))


def state(question: InputRequest, run_status: str) -> Html:
    """What became of the question: answered or declined (by whom, when, and whether the job
    has the answer), expired, cancelled, refused, or left open by a run that has ended."""
    answer = question.answer
    if question.status in _STATES and answer is not None:
        done = _STATES[question.status]
        if answer.by_policy:
            said = render(
                "Nobody answered in time: $done by the question's policy at $at.",
                done=done.lower(),
                at=when(answer.answered_at),
            )
        else:
            said = render(
                "$done by <b>$who</b> at $at.",
                done=done,
                who=answer.responder,
                at=when(answer.answered_at),
            )
        return banner("ok" if question.status == "answered" else "no", said, _delivery(question))
    if question.status == "expired":
        return banner(
            "no",
            render(
                "This question expired at $at: nobody answered in time.",
                at=when(question.expires_at),
            ),
        )
    if question.status == "cancelled":
        return banner("no", Html("This question was cancelled: it is no longer asked."))
    if question.status == "refused":
        return banner(
            "no",
            render(
                "The run could not ask this question: $why",
                why=question.refusal or "its schema takes no answer",
            ),
        )
    return banner(
        "no",
        render(
            "The run has ended ($status): this question can no longer be answered.",
            status=run_status,
        ),
    )


def applied(outcome: AnswerOutcome, responder: str) -> Html:
    """The news of an answer the run just took."""
    if outcome.status == "declined":
        return banner(
            "no",
            render("Declined by <b>$who</b>.", who=responder),
            Html("The job is told no answer is coming. You can close this page."),
        )
    if not outcome.delivered:
        return banner(
            "no",
            render("Answered by <b>$who</b>.", who=responder),
            render("The run took your answer, but the job did not: $why", why=outcome.reason),
        )
    return banner(
        "ok",
        render("Answered by <b>$who</b>.", who=responder),
        Html("The job has your answer. You can close this page."),
    )


def refused(message: str) -> Html:
    """The news of an answer the run refused, shown above the form to correct it."""
    return banner("no", render("The answer was not taken: $why", why=message))


def _delivery(question: InputRequest) -> Html:
    if question.answer is None or question.answer.action != "accept":
        return Html("")
    if question.delivery == "sent":
        return Html("The job has the answer.")
    if question.delivery == "failed":
        return render("The job did not take it: $why", why=question.delivery_error or "")
    return Html("The answer is on its way to the job.")


def _question(workflow_id: str, question: InputRequest) -> Html:
    sent_to = ", ".join(question.sent_to) or question.policy.recipients
    if question.escalated:
        sent_to = f"{sent_to} (escalated to {question.policy.escalate_to})"
    rows: list[tuple[str, Html | str]] = [
        ("Tool", render("<code>$tool</code>", tool=question.tool)),
        ("Run", render("<code>$run</code>", run=workflow_id)),
        ("Operation", render("<code>$op</code>", op=question.operation_id)),
        ("For", text(sent_to, 500)),
        ("Asked", when(question.asked_at)),
        ("Expires", when(question.expires_at)),
        ("Status", question.status),
    ]
    return render(_QUESTION, details=details(rows), message=question.message)


# --- the form ----------------------------------------------------------------------------------


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
            '<select id="$id" name="$name"$attributes>$options</select>',
            id=field_id,
            name=FIELD_PREFIX + name,
            attributes=attributes,
            options=listed,
        )
    elif kind == "string" and _long(field):
        box = render(
            '<textarea id="$id" name="$name" rows="4"$attributes>$value</textarea>',
            id=field_id,
            name=FIELD_PREFIX + name,
            attributes=attributes,
            value=shown,
        )
    else:
        box = render(
            '<input id="$id" name="$name" type="$type"$attributes value="$value">',
            id=field_id,
            name=FIELD_PREFIX + name,
            type=_input_type(field),
            attributes=attributes,
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
