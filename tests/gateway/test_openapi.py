"""The gateway's OpenAPI document, what a sender's client is generated from: every route says
what it takes (its token, its body, its headers) and every answer it can give, refusals
included, each with the error shape and a reason. The endpoints read their bodies themselves,
so none of this comes from FastAPI for free.

The bodies' fields are pinned beside each endpoint's tests: `test_app.py`, `test_approvals.py`,
`test_questions.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from tests.helpers import assert_error
from tests.rigs import MAX_BODY, OP, Gateway
from waitstate.auth.tokens import approval_subject, question_subject
from waitstate.gateway.delivery import DeliveryRefused
from waitstate.schemas.approvals import DecideOutcome
from waitstate.schemas.questions import AnswerOutcome

ERROR_BODY = {"$ref": "#/components/schemas/ErrorBody"}
# What every route answers whatever it is for: a bad or expired token, a body too large or
# malformed, Temporal or the run out of reach.
COMMON_REFUSALS = {"401", "410", "413", "422", "503"}


@dataclass(frozen=True)
class Route:
    path: str
    url: str
    subject: str
    operation_id: str
    body: str
    accepted: str
    # Every status the route documents, and what its 401 says a token for another one is for.
    statuses: set[str]
    names: str
    valid: dict[str, Any]
    # The refusals of the run (through the deliverer) the route passes on, and the outcomes
    # the run records without applying them.
    run_refusals: tuple[int, ...]
    not_applied: tuple[Any, ...] = ()


ROUTES = (
    Route(
        "/v1/operations/{operation_id}/complete",
        f"/v1/operations/{OP}/complete",
        OP,
        "complete_operation",
        "Completion",
        "Accepted",
        {"200", "401", "404", "409", "410", "413", "422", "503", "504"},
        "operation",
        {"status": "succeeded", "result": {"rows": 1}},
        (401, 404, 409, 503),
    ),
    Route(
        "/v1/approvals/{request_id}/decision",
        "/v1/approvals/apr_1/decision",
        approval_subject("apr_1"),
        "decide_approval",
        "DecisionBody",
        "DecisionAccepted",
        {"200", "401", "403", "404", "409", "410", "413", "422", "503", "504"},
        "request",
        {"decision": "approve", "reviewer": "ana"},
        (401, 404, 409, 503),
        (DecideOutcome(accepted=False, status="expired"),),
    ),
    Route(
        "/v1/questions/{question_id}/answer",
        "/v1/questions/q_1/answer",
        question_subject("q_1"),
        "answer_question",
        "AnswerBody",
        "AnswerAccepted",
        {"200", "401", "403", "404", "409", "410", "413", "422", "503", "504"},
        "question",
        {"action": "accept", "content": {"region": "EMEA"}},
        (401, 403, 404, 409, 422, 503),
        (AnswerOutcome(accepted=False, status="expired"),),
    ),
)


@dataclass(frozen=True)
class ThreadRoute:
    method: str
    path: str
    operation_id: str
    scheme: str  # the credential: its security scheme's name and bearer format
    bearer_format: str
    body: str | None
    answer: tuple[str, str]  # the status of its success, and its schema
    statuses: set[str]


THREAD_ROUTES = (
    ThreadRoute(
        "post",
        "/v1/threads",
        "start_thread",
        "OperatorKey",
        "operator key",
        "ThreadStart",
        ("201", "ThreadStarted"),
        {"201", "401", "404", "409", "410", "413", "422", "429", "503", "504"},
    ),
    ThreadRoute(
        "post",
        "/v1/threads/{thread_id}/messages",
        "post_message",
        "ThreadToken",
        "thread token",
        "MessageBody",
        ("202", "MessageAccepted"),
        {"202", "401", "404", "409", "410", "413", "422", "429", "503", "504"},
    ),
    ThreadRoute(
        "get",
        "/v1/threads/{thread_id}",
        "read_thread",
        "ThreadToken",
        "thread token",
        None,
        ("200", "ThreadView"),
        {"200", "401", "404", "409", "410", "422", "503"},
    ),
    ThreadRoute(
        "get",
        "/v1/threads/{thread_id}/messages/{message_id}",
        "read_message",
        "ThreadToken",
        "thread token",
        None,
        ("200", "ThreadMessage"),
        {"200", "401", "404", "409", "410", "422", "429", "503"},
    ),
    ThreadRoute(
        "post",
        "/v1/threads/{thread_id}/token",
        "renew_thread_token",
        "OperatorKey",
        "operator key",
        None,
        ("201", "ThreadToken"),
        {"201", "401", "404", "409", "410", "422", "503"},
    ),
)


@pytest.fixture(scope="module")
async def doc(served: Gateway) -> dict[str, Any]:
    response = await served.client.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def test_the_document_lists_the_routes_and_only_them(doc: dict[str, Any]) -> None:
    assert {path: set(operations) for path, operations in doc["paths"].items()} == {
        **{route.path: {"post"} for route in ROUTES},
        **{route.path: {route.method} for route in THREAD_ROUTES},
        "/v1/runs/{run_id}/events": {"get"},
        "/agui/agents/{agent}": {"post"},
        "/v1/runs/{run_id}/view-link": {"post"},
        "/v1/runs/{run_id}/deltas": {"post"},
        "/v1/operations/{operation_id}/a2a": {"post"},  # a remote A2A agent's push
        "/healthz": {"get"},
    }
    assert doc["info"]["title"] == "waitstate gateway"
    assert doc["info"]["description"]


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.operation_id)
def test_every_route_documents_its_token_body_answer_and_refusals(
    doc: dict[str, Any], route: Route
) -> None:
    post = doc["paths"][route.path]["post"]
    assert post["operationId"] == route.operation_id
    assert post["summary"] and post["description"]
    [path_parameter] = [p for p in post["parameters"] if p["in"] == "path"]
    assert f"{{{path_parameter['name']}}}" in route.path and path_parameter["required"]

    assert post["requestBody"] == {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{route.body}"}}},
    }
    accepted = post["responses"]["200"]
    assert accepted["description"].startswith("Accepted")
    assert accepted["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{route.accepted}"
    }

    assert set(post["responses"]) == route.statuses
    refusals = route.statuses - {"200"}
    assert refusals >= COMMON_REFUSALS
    assert route.names in post["responses"]["401"]["description"]
    for status in refusals:
        answer = post["responses"][status]
        assert answer["content"]["application/json"]["schema"] == ERROR_BODY, status
        assert len(answer["description"]) > 10, status

    [requirement] = post["security"]
    [scheme_name] = requirement
    scheme = doc["components"]["securitySchemes"][scheme_name]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == (
        "http",
        "bearer",
        "resume token",
    )
    assert scheme["description"]


def test_the_report_headers_are_documented_with_their_limits(doc: dict[str, Any]) -> None:
    post = doc["paths"]["/v1/operations/{operation_id}/complete"]["post"]
    headers = {p["name"]: p for p in post["parameters"] if p["in"] == "header"}

    assert set(headers) == {"Webhook-Id", "Idempotency-Key"}
    for header in headers.values():
        assert header["required"] is False and header["description"]
        [text, _] = header["schema"]["anyOf"]
        assert (text["minLength"], text["maxLength"]) == (1, 200)


def test_every_reference_resolves(doc: dict[str, Any]) -> None:
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    schemas = doc["components"]["schemas"]
    prefix = "#/components/schemas/"
    assert refs and all(ref.startswith(prefix) for ref in refs)
    assert {ref.removeprefix(prefix) for ref in refs} <= set(schemas)
    # `key` and `thread_id` only with `outcome_unknown`: what its retry must carry.
    assert set(schemas["ErrorDetail"]["properties"]) == {"code", "message", "key", "thread_id"}
    assert schemas["ErrorDetail"]["required"] == ["code", "message"]


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.operation_id)
async def test_every_refusal_a_route_answers_is_documented(
    gw: Gateway, doc: dict[str, Any], route: Route
) -> None:
    documented = set(doc["paths"][route.path]["post"]["responses"])

    def auth(expires_in: timedelta = timedelta(hours=1)) -> dict[str, str]:
        return {"Authorization": f"Bearer {gw.token(route.subject, expires_in=expires_in)}"}

    answers = [
        await gw.client.post(route.url, json=route.valid),
        await gw.client.post(route.url, json=route.valid, headers=gw.auth("op_other")),
        await gw.client.post(route.url, json=route.valid, headers=auth(-timedelta(seconds=1))),
        await gw.client.post(route.url, content=b"x" * (MAX_BODY + 1), headers=auth()),
        await gw.client.post(route.url, content=b"not json", headers=auth()),
        await gw.client.post(route.url, json={"status": "x", "action": 1}, headers=auth()),
    ]
    for status in route.run_refusals:
        gw.deliverer.script.append(DeliveryRefused(status, f"refused with {status}"))
        answers.append(await gw.client.post(route.url, json=route.valid, headers=auth()))
    for outcome in route.not_applied:
        gw.deliverer.script.append(outcome)
        answers.append(await gw.client.post(route.url, json=route.valid, headers=auth()))

    for response in answers:
        assert_error(response, response.status_code)
        assert str(response.status_code) in documented, (response.status_code, response.text)
    assert {str(response.status_code) for response in answers} >= COMMON_REFUSALS - {"503"}


@pytest.mark.parametrize("route", THREAD_ROUTES, ids=lambda route: route.operation_id)
def test_every_thread_route_documents_its_credential_body_answer_and_refusals(
    doc: dict[str, Any], route: ThreadRoute
) -> None:
    operation = doc["paths"][route.path][route.method]
    assert operation["operationId"] == route.operation_id
    assert operation["summary"] and operation["description"]
    path_parameters = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
    assert {f"{{{name}}}" for name in path_parameters} == set(re.findall(r"{\w+}", route.path))

    if route.body is None:
        assert "requestBody" not in operation
    else:
        schema = {"$ref": f"#/components/schemas/{route.body}"}
        assert operation["requestBody"] == {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
        # Unknown fields are refused, not dropped.
        assert doc["components"]["schemas"][route.body]["additionalProperties"] is False
    status, answer = route.answer
    assert operation["responses"][status]["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{answer}"
    }
    assert set(operation["responses"]) == route.statuses
    for refusal in route.statuses - {status}:
        documented = operation["responses"][refusal]
        assert documented["content"]["application/json"]["schema"] == ERROR_BODY, refusal
        assert len(documented["description"]) > 10, refusal

    assert operation["security"] == [{route.scheme: []}]
    scheme = doc["components"]["securitySchemes"][route.scheme]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == (
        "http",
        "bearer",
        route.bearer_format,
    )
    assert scheme["description"]


def test_a_runs_events_are_documented_as_a_stream_of_run_events_with_where_to_resume(
    doc: dict[str, Any],
) -> None:
    operation = doc["paths"]["/v1/runs/{run_id}/events"]["get"]
    link = doc["paths"]["/v1/runs/{run_id}/view-link"]["post"]
    streamed = operation["responses"]["200"]["content"]
    parameters = {(p["in"], p["name"]) for p in operation["parameters"]}

    assert (operation["operationId"], link["operationId"]) == ("run_events", "view_link")
    assert streamed == {"text/event-stream": {"schema": {"$ref": "#/components/schemas/RunEvent"}}}
    assert set(doc["components"]["schemas"]["RunEvent"]["properties"]) == {
        "id",
        "kind",
        "at",
        "summary",
        "detail",
    }
    assert parameters == {
        ("path", "run_id"),
        ("query", "token"),
        ("query", "after"),
        ("header", "last-event-id"),
    }
    assert {"204", "400", "401", "404", "410", "503"} <= set(operation["responses"])
    assert operation["security"] == [{"ViewToken": []}]
    assert link["security"] == [{"OperatorKey": []}]
    assert link["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ViewLink"
    }


def test_a_read_documents_how_long_it_may_wait(doc: dict[str, Any]) -> None:
    operation = doc["paths"]["/v1/threads/{thread_id}/messages/{message_id}"]["get"]
    [wait] = [p for p in operation["parameters"] if p["in"] == "query"]

    assert (wait["name"], wait["required"]) == ("wait", False)
    assert (wait["schema"]["minimum"], wait["schema"]["maximum"]) == (0, 30)
    assert wait["description"]


def test_a_runs_deltas_are_documented_with_their_token_body_and_refusals(
    doc: dict[str, Any],
) -> None:
    operation = doc["paths"]["/v1/runs/{run_id}/deltas"]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]

    assert operation["operationId"] == "run_deltas"
    assert operation["summary"] and "model.delta" in operation["description"]
    assert operation["requestBody"]["required"] is True
    assert set(body["properties"]) == {"turn", "call", "text"}
    assert body["additionalProperties"] is False
    assert body["properties"]["text"]["maxLength"] == 8_000
    assert set(operation["responses"]) == {"202", "400", "401", "404", "410", "413", "422"}
    for status in ("400", "401", "404", "410", "413", "422"):
        answer = operation["responses"][status]
        assert answer["content"]["application/json"]["schema"] == ERROR_BODY, status
    assert operation["security"] == [{"PublishToken": []}]
    scheme = doc["components"]["securitySchemes"]["PublishToken"]
    assert (scheme["scheme"], scheme["bearerFormat"]) == ("bearer", "publish token")
