"""A run's timeline as a person follows it, in a real browser: the view link opened in headless
chromium while the run's export job runs (the demo export service never finishes a job on its
own: the test reports on it through the job's callback), each report shown as it is made,
without a reload, and the run's end; under the page's own headers (its content security
policy, which lets its script read the run's stream and nothing else)."""

from __future__ import annotations

import asyncio
from typing import Any

from playwright.async_api import Browser, ConsoleMessage, Page, Request, expect
from temporalio.client import WorkflowHandle

from examples.systems.jobs import JobRecord
from tests.gateway.test_events import WITHIN, rig
from tests.rigs import EXPORT_TASK, EXPORT_TOOLS, EventReader, Stack
from waitstate.schemas import RunResult

__all__ = ["rig"]

TIMEOUT_MS = WITHIN * 1000


async def _page(browser: Browser) -> tuple[Page, list[str], list[str]]:
    """A new page, what its console says (a content security policy's refusal among it), and
    the URLs it requested."""
    page = await browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    said: list[str] = []
    requested: list[str] = []

    def heard(message: ConsoleMessage) -> None:
        said.append(f"{message.type}: {message.text}")

    def sent(request: Request) -> None:
        requested.append(request.url)

    page.on("console", heard)
    page.on("request", sent)
    return page, said, requested


async def _viewing_an_export(
    rig: Stack, browser: Browser
) -> tuple[WorkflowHandle[Any, RunResult], dict[str, Any], tuple[Page, list[str], list[str]]]:
    """An export run, its view link, and a new page (as `_page` gives it) that opened the link."""
    handle = await rig.start(EXPORT_TASK, EXPORT_TOOLS)
    link = await rig.view_link(handle.id)
    page, said, requested = await _page(browser)
    opened = await page.goto(link["url"])
    assert opened is not None and opened.status == 200
    return handle, link, (page, said, requested)


async def _kinds(page: Page) -> list[str]:
    kinds: list[str] = await page.locator("#events dd").evaluate_all(
        "rows => rows.map((row) => row.dataset.kind)"
    )
    return kinds


async def _report(rig: Stack, job: JobRecord, body: dict[str, Any]) -> None:
    """Report on the job through its callback, as its system would; the gateway takes it."""
    auth = {"Authorization": f"Bearer {job.callback_token}"}
    assert job.callback_url is not None
    sent = await rig.http.post(job.callback_url, json=body, headers=auth)
    assert sent.status_code == 200, sent.text


async def test_a_view_links_page_shows_an_operations_progress_as_it_is_reported(
    rig: Stack, browser: Browser
) -> None:
    async with rig.worker():
        handle, link, (page, said, requested) = await _viewing_an_export(rig, browser)
        await expect(page.locator("h1")).to_have_text("Run timeline", timeout=TIMEOUT_MS)
        await expect(page.locator("main > dl").first).to_contain_text(handle.id, timeout=TIMEOUT_MS)
        await page.evaluate("window.loadedOnce = true")  # gone if the page were loaded again
        rows = page.locator("#events dd")
        status = page.locator("#status-text")
        await expect(rows.first).to_have_attribute("data-kind", "run.started", timeout=TIMEOUT_MS)
        # The export job was started: the run waits for its report.
        job = await rig.job(handle.id)
        await expect(status).to_contain_text("waiting for webhook", timeout=TIMEOUT_MS)
        reports = page.locator("#events dd[data-kind='operation.reported']")
        for seen, progress in enumerate(("40%", "80%"), start=1):
            await _report(rig, job, {"status": "running", "progress": progress})
            await expect(reports).to_have_count(seen, timeout=TIMEOUT_MS)
            await expect(reports.last).to_contain_text(f"progress: {progress}", timeout=TIMEOUT_MS)
            await expect(reports.last).to_contain_text("status: running", timeout=TIMEOUT_MS)
        await _report(rig, job, {"status": "succeeded", "result": {"file": "x.csv", "rows": 7}})
        result = await asyncio.wait_for(handle.result(), WITHIN)
        await expect(status).to_have_text("The run has ended: completed.", timeout=TIMEOUT_MS)
        await expect(page.locator("#status")).to_have_class("banner ok", timeout=TIMEOUT_MS)
        await expect(rows.last).to_have_attribute("data-kind", "run.completed", timeout=TIMEOUT_MS)
        shown = await _kinds(page)
        same_page = await page.evaluate("window.loadedOnce === true")
        async with rig.events(link["events_url"]) as response:
            streamed = await EventReader(response, WITHIN).take()

        # The link again once the run has ended: its whole timeline, and its end.
        again, said_again, _ = await _page(browser)
        await again.goto(link["url"])
        await expect(again.locator("#status-text")).to_have_text(
            "The run has ended: completed.", timeout=TIMEOUT_MS
        )
        shown_again = await _kinds(again)

    assert result.status == "completed"
    assert same_page
    # One page load and one stream, read from the page's own origin with the link's token.
    assert requested == [link["url"], link["events_url"]]
    # Each of the run's events, once, in its order, on both pages.
    assert shown == [e.kind for e in streamed] == shown_again
    assert said == [] and said_again == []  # no refusal of the page's style, script or stream


async def test_what_an_event_carries_goes_into_the_page_as_text(
    rig: Stack, browser: Browser
) -> None:
    async with rig.worker():
        handle, _, (page, said, _) = await _viewing_an_export(rig, browser)
        job = await rig.job(handle.id)
        hostile = '<img src=x onerror="document.title=1">\u202e'
        await _report(rig, job, {"status": "running", "progress": hostile})
        report = page.locator("#events dd[data-kind='operation.reported']")
        await expect(report).to_contain_text(
            'progress: <img src=x onerror="document.title=1">', timeout=TIMEOUT_MS
        )
        images = await page.locator("#events img").count()
        title = await page.title()
        shown: Any = await report.text_content()
    await handle.terminate("the test has what it needs")

    assert images == 0 and title == "Run timeline"
    assert "\u202e" not in shown and "\\u202e" in shown
    assert said == []
