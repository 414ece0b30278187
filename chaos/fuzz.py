"""Fuzzed gateway requests, from the gateway's own OpenAPI document, with hypothesis.

Each example is one request to an endpoint the document describes (`POST` with a path id and
a JSON body), or a neighbour of it: another method, a random or foreign path id, a body that
is random JSON, shaped like the schema but wrong, not JSON at all, or over the body limit
(also sent chunked, with no Content-Length), and a missing, garbled, foreign or real
Authorization header, and any Content-Type. The one request excluded is the legitimate one
(the real token for the URL's id with a valid body): everything sent is garbage.

The invariant: never a 5xx, never a 2xx, and a body over the limit is a 413 wherever the
route exists. Violations are recorded, not raised, so hypothesis neither stops nor shrinks:
the suite reports every one.

Sync on purpose: hypothesis drives a plain function; the caller runs it in a thread.
"""

from __future__ import annotations

import json
import os
import string
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as seeded
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from pydantic import BaseModel, ValidationError

from waitstate.gateway.app import DEFAULT_MAX_BODY_BYTES
from waitstate.gateway.threads import MessageBody, ThreadStart
from waitstate.schemas.approvals import DecisionBody
from waitstate.schemas.operations import Completion
from waitstate.schemas.questions import AnswerBody

# The hand-read bodies, by their component name in the document: what "valid" means.
MODELS: Mapping[str, type[BaseModel]] = {
    "Completion": Completion,
    "DecisionBody": DecisionBody,
    "AnswerBody": AnswerBody,
    "MessageBody": MessageBody,
    "ThreadStart": ThreadStart,
}
# A string at (or just past) its `maxLength` is drawn only up to this many characters: a longer
# one (a thread's message takes 32,000) makes hypothesis warn of the size of its repr, and the
# body's own limit is fuzzed by the oversize bodies.
_SHAPED_LIMIT = 4096
# Mostly the documented method: another one only proves the router's 405.
_METHODS = ["POST"] * 36 + ["GET", "PUT", "PATCH", "DELETE"]
# Header values as bytes (httpx sends str values as ASCII only): visible ASCII, spaces, and
# the obs-text bytes HTTP/1.1 tolerates; h11 refuses control characters, so none are drawn.
_HEADER_TEXT = st.binary(max_size=80).map(
    lambda raw: bytes(b if 0x20 <= b < 0x7F or b >= 0x80 else 0x41 for b in raw).strip()
)
_PRINTABLE = st.text(st.sampled_from(string.printable.strip() + " "), max_size=60)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@dataclass(frozen=True)
class FuzzTarget:
    """The gateway and what of the attacked runs the fuzzer may use.

    `ids` and `tokens` are keyed by the path parameter's name in the OpenAPI document
    (`operation_id`, `request_id`, `question_id`, `thread_id`, `run_id`): the real id of a waiting run (or
    thread), and its real token. Every endpoint the document describes needs both.
    """

    gateway_url: str
    ids: Mapping[str, str]
    tokens: Mapping[str, str]
    other_tokens: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


@dataclass
class FuzzReport:
    """What the fuzzer sent and saw."""

    sent: int = 0
    skipped: int = 0  # requests httpx would not send (a header it cannot encode...)
    skip_reasons: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Endpoint:
    path: str  # the template, e.g. /v1/operations/{operation_id}/complete
    param: str
    schema: dict[str, Any]
    model: type[BaseModel] | None


def endpoints(openapi: Mapping[str, Any]) -> list[_Endpoint]:
    """The document's POST endpoints with one path parameter and a JSON body."""
    components = openapi.get("components", {}).get("schemas", {})
    found = []
    for path, methods in openapi.get("paths", {}).items():
        post = methods.get("post")
        if post is None or "requestBody" not in post:
            continue
        params = [p["name"] for p in post.get("parameters", []) if p.get("in") == "path"]
        schema = post["requestBody"]["content"]["application/json"]["schema"]
        name = schema.get("$ref", "").rsplit("/", 1)[-1]
        body = _resolve(schema, components)
        if len(params) == 1:
            found.append(
                _Endpoint(path, params[0], body | {"$components": components}, MODELS.get(name))
            )
    return found


def fuzz_gateway(
    target: FuzzTarget, openapi: Mapping[str, Any], *, examples: int, seed: int
) -> FuzzReport:
    """Send `examples` fuzzed requests and report every answer that breaks the invariant."""
    if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
        # No example database is kept (database=None), but hypothesis still caches what it
        # learns of the code under test in its home directory (./.hypothesis by default):
        # keep it out of the checkout.
        set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "waitstate-hypothesis")
    report = FuzzReport()
    routes = endpoints(openapi)
    if not routes:
        report.violations.append("the OpenAPI document describes no endpoint to fuzz")
        return report
    if untargeted := sorted({r.path for r in routes if r.param not in target.tokens}):
        # An endpoint nothing is aimed at would go unfuzzed, unnoticed.
        report.violations.append(f"no id and token to fuzz {', '.join(untargeted)} with")
        return report
    with httpx.Client(base_url=target.gateway_url, timeout=30) as http:

        @seeded(seed)
        @settings(
            max_examples=examples,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        )
        @given(st.data())
        def probe(data: st.DataObject) -> None:
            request = data.draw(_requests(target, routes))
            _send(http, target, request, report)

        probe()
    return report


@dataclass(frozen=True)
class _Request:
    method: str
    route: _Endpoint
    path_id: str
    real_id: bool
    headers: dict[str, str | bytes]
    body: bytes
    chunked: bool
    label: str


@st.composite
def _requests(draw: st.DrawFn, target: FuzzTarget, routes: list[_Endpoint]) -> _Request:
    route = draw(st.sampled_from(routes))
    method = draw(st.sampled_from(_METHODS))
    real_id = target.ids.get(route.param, "")
    foreign_ids = [i for name, i in target.ids.items() if name != route.param]
    # The real id often, so requests get past the router and the token check to the body's.
    real_path = st.just(("real", real_id))
    path_kind, path_id = draw(
        st.one_of(
            real_path,
            real_path,
            st.sampled_from([("foreign", i) for i in foreign_ids] or [("real", real_id)]),
            st.tuples(st.just("random"), st.text(min_size=1, max_size=40)),
            st.tuples(st.just("ascii"), _PRINTABLE.filter(bool)),
        )
    )
    body_kind, body = draw(_bodies(route, target.max_body_bytes))
    auth_kind, auth = draw(_authorizations(target, route))
    real_token = target.tokens[route.param]
    legit = path_kind == "real" and _is_bearer(auth, real_token) and _valid(route, body)
    if legit:
        # The one request that is not garbage: spoil its token (one character off).
        auth_kind, auth = "spoiled", f"Bearer {_flip(target.tokens[route.param])}"
    headers: dict[str, str | bytes] = {} if auth is None else {"Authorization": auth}
    content_type = draw(
        st.sampled_from(
            [None, "application/json", "text/plain", "application/x-www-form-urlencoded"]
        )
        | _HEADER_TEXT
    )
    if content_type is not None:
        headers["Content-Type"] = content_type
    return _Request(
        method=method,
        route=route,
        path_id=path_id,
        real_id=path_kind in ("real", "foreign"),
        headers=headers,
        body=body,
        chunked=draw(st.booleans()) if body else False,
        label=f"{method} {route.param}={path_kind} body={body_kind}({len(body)}B) auth={auth_kind}",
    )


def _bodies(route: _Endpoint, limit: int) -> st.SearchStrategy[tuple[str, bytes]]:
    shaped = _from_schema(route.schema, route.schema["$components"])
    return st.one_of(
        st.tuples(st.just("schema-shaped"), shaped.map(_dump)),
        st.tuples(st.just("json"), _JSON.map(_dump)),
        st.tuples(st.just("text"), st.text(max_size=200).map(str.encode)),
        st.tuples(st.just("binary"), st.binary(max_size=200)),
        st.tuples(st.just("empty"), st.just(b"")),
        st.tuples(
            st.just("oversize"),
            st.sampled_from([limit + 1, limit + 4096, 2 * limit]).map(lambda n: _oversize(n)),
        ),
    )


def _authorizations(
    target: FuzzTarget, route: _Endpoint
) -> st.SearchStrategy[tuple[str, str | bytes | None]]:
    real = target.tokens[route.param]
    foreign = [t for name, t in target.tokens.items() if name != route.param]
    tokens = [("foreign", t) for t in foreign] + [("other", t) for t in target.other_tokens]
    token = st.sampled_from(tokens or [("real", real)]) | st.tuples(
        st.just("garbled"), st.sampled_from([real, *target.other_tokens]).flatmap(_garble)
    )
    # The real token often (a body's refusal is only reached past the token check).
    real_auth = st.just(("real", f"Bearer {real}"))
    return st.one_of(
        real_auth,
        real_auth,
        real_auth,
        st.just(("missing", None)),
        token.map(lambda kt: (kt[0], f"Bearer {kt[1]}")),
        st.tuples(st.just("random"), _HEADER_TEXT),
        st.tuples(st.just("random-bearer"), _PRINTABLE.map(lambda t: f"Bearer {t}".strip())),
        st.tuples(
            st.just("scheme"),
            st.sampled_from(["Basic ", "bearer ", "Token ", "Bearer  ", ""]).map(
                lambda scheme: f"{scheme}{real}"
            ),
        ),
    )


def _is_bearer(auth: str | bytes | None, token: str) -> bool:
    """Whether `auth` is a well-formed bearer credential for `token`: RFC 7235's scheme is
    case-insensitive and one or more spaces follow it, so `bearer T` and `Bearer  T` are the
    real token too, not garbage."""
    if not isinstance(auth, str):
        return False
    scheme, _, rest = auth.partition(" ")
    return scheme.lower() == "bearer" and rest.lstrip(" ") == token


def _garble(token: str) -> st.SearchStrategy[str]:
    """A token cut, extended, or with one character changed."""
    return st.one_of(
        st.integers(1, len(token) - 1).map(lambda n: token[:n]),
        _PRINTABLE.map(lambda tail: token + tail).filter(lambda t: t != token),
        st.integers(0, len(token) - 1).map(lambda n: _flip(token, n)),
    )


def _flip(token: str, at: int = 0) -> str:
    replacement = "A" if token[at] != "A" else "B"
    return token[:at] + replacement + token[at + 1 :]


def _from_schema(
    schema: Mapping[str, Any], components: Mapping[str, Any]
) -> st.SearchStrategy[Any]:
    """Values shaped like `schema` (right names, right and wrong values), often invalid."""
    schema = _resolve(schema, components)
    options: list[st.SearchStrategy[Any]] = [_JSON]  # anything may be wrong
    if "enum" in schema:
        options.append(st.sampled_from(schema["enum"]))
    if "const" in schema:
        options.append(st.just(schema["const"]))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            options.append(_from_schema(sub, components))  # no schema here is recursive
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        properties = {
            name: _from_schema(sub, components)
            for name, sub in schema.get("properties", {}).items()
        }
        options.append(
            st.fixed_dictionaries({}, optional=properties).flatmap(
                lambda d: (
                    st.dictionaries(st.text(max_size=8), _JSON, max_size=2).map(
                        lambda extra: {**d, **extra}
                    )
                    | st.just(d)
                )
            )
        )
    elif kind == "string":
        limit = schema.get("maxLength")
        options.append(st.text(max_size=40))
        if limit is not None and limit <= _SHAPED_LIMIT:
            options.append(st.integers(limit, limit + 2).map(lambda n: "x" * n))
    elif kind in ("integer", "number"):
        options.append(st.integers() | st.floats(allow_nan=False))
    elif kind == "boolean":
        options.append(st.booleans())
    elif kind == "array":
        items = schema.get("items", {})
        options.append(st.lists(_from_schema(items, components), max_size=3))
    return st.one_of(options)


def _resolve(schema: Mapping[str, Any], components: Mapping[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        return _resolve(components[ref.rsplit("/", 1)[-1]], components)
    return dict(schema)


def _dump(value: Any) -> bytes:
    return json.dumps(value).encode()


def _oversize(size: int) -> bytes:
    """A JSON document of `size` bytes: valid JSON, but over the limit."""
    head, tail = b'{"status":"succeeded","result":"', b'"}'
    return head + b"x" * max(0, size - len(head) - len(tail)) + tail


def _valid(route: _Endpoint, body: bytes) -> bool:
    """Whether the body is a valid one for the route (unknown models count as valid, so the
    real token is never sent with them)."""
    if route.model is None:
        return True
    try:
        route.model.model_validate_json(body)
    except ValidationError:
        return False
    return True


def _chunks(body: bytes) -> Iterator[bytes]:
    step = 65536
    for start in range(0, len(body), step):
        yield body[start : start + step]


def _send(http: httpx.Client, target: FuzzTarget, request: _Request, report: FuzzReport) -> None:
    path = request.route.path.replace(
        "{" + request.route.param + "}", quote(request.path_id, safe="")
    )
    content: bytes | Iterator[bytes] = _chunks(request.body) if request.chunked else request.body
    try:
        headers = [
            (name.encode(), value if isinstance(value, bytes) else value.encode("latin-1"))
            for name, value in request.headers.items()
        ]
        answer = http.request(request.method, path, content=content, headers=headers)
    except (httpx.LocalProtocolError, UnicodeEncodeError, ValueError) as err:
        report.skipped += 1  # a header httpx will not send: not a request to the gateway
        report.skip_reasons[f"{type(err).__name__}: {str(err)[:60]}"] += 1
        return
    except httpx.TransportError as err:
        report.sent += 1
        report.violations.append(f"{request.label}: no answer ({type(err).__name__}: {err})")
        return
    report.sent += 1
    status = answer.status_code
    report.statuses[status] += 1
    if status >= 500:
        report.violations.append(f"{request.label}: {status} {answer.text[:200]}")
    elif 200 <= status < 300:
        report.violations.append(
            f"{request.label}: accepted garbage ({status} {answer.text[:200]})"
        )
    elif (
        len(request.body) > target.max_body_bytes
        and request.method == "POST"
        and status not in (404, 405)
        and status != 413
    ):
        report.violations.append(f"{request.label}: {status} for an oversize body, not 413")
