"""An agent whose tool's job asks a person a question before it runs (`asker`), served over
A2A by `tests/a2a/test_a2a_questions.py`: the question is the task's input-required."""

from __future__ import annotations

from tests.one_question_job import OneQuestionJob
from tests.workflows.steering_app import asking_export, exporter
from waitstate import Agent, App, Completion, Question

APP = "tests.a2a.asker_app:app"
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
JOB = OneQuestionJob(
    "a2a-asks-1",
    Question(key="ok", message="Export everything?", requested_schema=SCHEMA),
    Completion(status="succeeded", result={"rows": 3}),
)

app = App(
    agents=[Agent("asker", model="scripted:a2a-export-asks", tools=["start_export_asks"])],
    tools=[asking_export(JOB)],
    scripts={"a2a-export-asks": exporter("asks")},
)
