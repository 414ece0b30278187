"""The pages' HTML: the layout every page shares, its headers, and how text goes into it.

What a page shows came largely from outside (a tool's arguments and the model's reason, a job's
question and its schema, a reviewer's name): `render` escapes every value it puts into a
template unless it is `Html` already, so a template cannot forget to, and `text` cuts it to a
bound and shows the characters that would reorder or hide it as escapes.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from string import Template
from typing import Any

# What one value may show: a reason, a question or a comment is bounded where it is made
# (5,000 characters), a tool's arguments are not.
MAX_TEXT_CHARS = 5_000
MAX_ARGUMENTS_CHARS = 20_000
# Controls and the characters that reorder or hide text (bidi embeddings, overrides and
# isolates, line and paragraph separators), as the CLI shows them (`cli.output`); tab and
# newline are kept.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")

STYLE = """
:root { color-scheme: light dark; --ok: #1a7f37; --no: #cf222e; --muted: #6e7781;
  --line: #8c959f66; --tint: #8c959f1a; }
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; padding: 1rem; }
main { max-width: 46rem; margin: 0 auto; }
h1 { font-size: 1.5rem; margin: .5rem 0 1rem; }
h2 { font-size: 1.1rem; margin: 1.5rem 0 .5rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; margin: 0; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: anywhere; }
pre, .text { white-space: pre-wrap; overflow-wrap: anywhere; }
pre { background: var(--tint); border: 1px solid var(--line); border-radius: .4rem;
  padding: .75rem; max-height: 24rem; overflow: auto; font-size: .9rem; }
.message { background: var(--tint); border-radius: .4rem; padding: .75rem; }
.banner { border: 1px solid var(--line); border-left-width: .4rem; border-radius: .4rem;
  padding: .75rem 1rem; margin: 1rem 0; }
.banner.ok { border-left-color: var(--ok); }
.banner.no { border-left-color: var(--no); }
.banner p { margin: .25rem 0; }
.field { margin: 1rem 0; }
.field > label, .field > legend { display: block; font-weight: 600; }
fieldset { border: 0; padding: 0; margin: 1rem 0; }
legend { padding: 0; }
input, select, textarea { font: inherit; box-sizing: border-box; width: 100%; padding: .4rem;
  margin-top: .25rem; }
input[type=checkbox] { width: auto; margin: 0 .4rem 0 0; }
label.choice { display: block; font-weight: normal; }
.hint { color: var(--muted); font-size: .9rem; margin: .25rem 0 0; }
.required { color: var(--no); }
.buttons { display: flex; flex-wrap: wrap; gap: .75rem; margin-top: 1.25rem; }
button { font: inherit; font-weight: 600; padding: .5rem 1.5rem; border: 0; border-radius: .4rem;
  color: #fff; cursor: pointer; }
button.yes { background: var(--ok); }
button.no { background: var(--no); }
footer { color: var(--muted); font-size: .85rem; margin-top: 2rem; }
"""

# A form is sent once: a second click would send a second copy (the run would refuse it, and
# the page the person sees would be the copy's refusal, not their decision's outcome).
SCRIPT = """
for (const form of document.querySelectorAll("form")) {
  let sent = false;
  form.addEventListener("submit", (event) => {
    if (sent) { event.preventDefault(); }
    sent = true;
  });
}
"""


def _digest(source: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


# Nothing but the page's own style and script, no frames around it, forms sent only here.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src '{_digest(STYLE)}'; script-src '{_digest(SCRIPT)}'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    # The page's URL carries its token: no request from the page may name it.
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex, nofollow",
}


def live_policy(script: str) -> str:
    """The content security policy of a page that follows a run live (its timeline): the
    pages' policy, with `script` allowed besides their own, and this gateway's event streams
    (`EventSource`, `connect-src 'self'`) the one thing it may fetch."""
    return (
        f"default-src 'none'; style-src '{_digest(STYLE)}'; "
        f"script-src '{_digest(SCRIPT)}' '{_digest(script)}'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )


_DOCUMENT = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex, nofollow">
<title>$title</title>
<style>$style</style>
</head>
<body>
<main>
<h1>$title</h1>
$body
<footer>waitstate</footer>
</main>
<script>$script</script>
</body>
</html>
"""


class Html(str):
    """Markup: a template's own HTML with its values escaped. `render` puts it in as is."""


@dataclass(frozen=True)
class FormTarget:
    """Where a page's form is sent (relative to the page: the page's path without its query
    string, so the token is not in the URL of what it sends), and what it sends back besides
    the person's input: the page's token and its form key (`guard.form_key`)."""

    action: str
    token: str
    form_key: str

    def hidden(self) -> Html:
        """The form's hidden fields."""
        return render(
            '<input type="hidden" name="token" value="$token">\n'
            '<input type="hidden" name="form_key" value="$form_key">',
            token=self.token,
            form_key=self.form_key,
        )


def text(value: object, limit: int = MAX_TEXT_CHARS) -> Html:
    """`value` as text in HTML, fit for an element or an attribute's value: cut to `limit`
    characters, the characters that would reorder or hide it shown as escapes, escaped."""
    shown = str(value)
    if len(shown) > limit:
        shown = f"{shown[:limit]}... ({len(shown)} characters)"
    shown = _HIDDEN.sub(lambda match: f"\\u{ord(match.group()):04x}", shown)
    return Html(html.escape(shown, quote=True))


def render(template: str, **values: object) -> Html:
    """`template` with its `$name`s replaced by `values`: each escaped (`text`) unless it is
    `Html`."""
    escaped = {
        name: value if isinstance(value, Html) else text(value) for name, value in values.items()
    }
    return Html(Template(template).substitute(escaped))


def join(parts: list[Html]) -> Html:
    """Pieces of markup, one after the other."""
    return Html("\n".join(parts))


def document(title: str, body: Html) -> str:
    """A whole page: `title` as its title and heading, then `body`."""
    return render(_DOCUMENT, title=title, body=body, style=Html(STYLE), script=Html(SCRIPT))


def when(moment: datetime | None) -> Html:
    """A moment as a page shows it: UTC, to the minute."""
    if moment is None:
        return Html("")
    utc = moment.astimezone(UTC)
    return render(
        '<time datetime="$iso">$shown</time>',
        iso=utc.isoformat(),
        shown=utc.strftime("%Y-%m-%d %H:%M UTC"),
    )


def pretty_json(value: Any) -> Html:
    """A JSON value indented for people, cut to `MAX_ARGUMENTS_CHARS`, escaped."""
    try:
        shown = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        shown = repr(value)
    return text(shown, MAX_ARGUMENTS_CHARS)


def banner(kind: str, *paragraphs: Html) -> Html:
    """A box at the top of a page that says what happened: `ok` or `no`."""
    inner = join([render("<p>$p</p>", p=paragraph) for paragraph in paragraphs if paragraph])
    return render('<div class="banner $kind" role="status">$inner</div>', kind=kind, inner=inner)


def details(rows: list[tuple[str, Html | str]]) -> Html:
    """A definition list of (what, value) rows, the empty ones left out."""
    return render(
        "<dl>$rows</dl>",
        rows=join(
            [render("<dt>$dt</dt><dd>$dd</dd>", dt=dt, dd=dd) for dt, dd in rows if dd != ""]
        ),
    )


def ended(run_status: str, what: str) -> Html:
    """The news that a run has ended before `what` (`this request`) was settled."""
    return banner(
        "no",
        render(
            "The run has ended ($status): $what can no longer be settled here.",
            status=run_status,
            what=what,
        ),
    )


def error(title: str, message: str, hint: str = "") -> str:
    """A page that says why what was asked was refused, and what to do about it if anything."""
    return document(title, banner("no", text(message), text(hint)))
