"""The pages as a person uses them, in a real browser: the link from a real notice opened in
headless chromium, the form filled in and sent with a click, under the pages' own headers
(their content security policy, their referrer policy, which makes the browser send the form
with `Origin: null`)."""

from __future__ import annotations

import asyncio
from typing import Any

from playwright.async_api import Browser, ConsoleMessage, Page, expect

from tests.gateway.test_pages import WITHIN, _answered_job, _ask, asking
from tests.rigs import REFUND_TASK, REFUND_TOOLS, Stack

TIMEOUT_MS = WITHIN * 1000


async def _page(browser: Browser) -> tuple[Page, list[str]]:
    """A new page, and what its console says (a content security policy's refusal among it)."""
    page = await browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    said: list[str] = []

    def heard(message: ConsoleMessage) -> None:
        said.append(f"{message.type}: {message.text}")

    page.on("console", heard)
    return page, said


async def test_a_person_approves_from_the_notices_link_and_the_link_is_then_used(
    rig: Stack, browser: Browser
) -> None:
    async with rig.worker():
        handle = await rig.start(REFUND_TASK, REFUND_TOOLS)
        url, request_id, _ = await rig.approval_link(handle.id)
        page, said = await _page(browser)

        opened = await page.goto(url)
        assert opened is not None and opened.status == 200
        await expect(page.locator("h1")).to_have_text("Approval requested")
        await expect(page.locator("dl")).to_contain_text(request_id)
        await expect(page.locator("pre")).to_contain_text('"amount": 420')
        await page.fill("#reviewer", "ana")
        await page.fill("#comment", "within policy")
        async with page.expect_response(lambda r: r.request.method == "POST") as posted:
            await page.click("button[value=approve]")
        response = await posted.value
        await expect(page.locator("h1")).to_have_text("Approved")
        await expect(page.locator(".banner")).to_contain_text("Approved by ana.")
        result = await asyncio.wait_for(handle.result(), WITHIN)

        # The link again, later: the request is decided, and the page says by whom.
        again = await page.goto(url)
        assert again is not None and again.status == 200
        await expect(page.locator("h1")).to_have_text("Approval request: approved")
        await expect(page.locator(".banner")).to_contain_text("Approved by ana at")
        buttons = await page.locator("button").count()
        sent_with: dict[str, Any] = await response.request.all_headers()

    assert response.status == 200
    # The token is in the page's URL only: the form sends it in its body, to the page's path.
    assert response.url == f"{rig.gateway_url}/pages/approvals/{request_id}"
    assert sent_with.get("origin") == "null" and "referer" not in sent_with
    assert result.status == "completed"
    assert buttons == 0
    assert said == []  # no refusal of the page's style or script, no error


async def test_a_person_answers_a_question_through_the_form_its_schema_makes(
    rig: Stack, browser: Browser
) -> None:
    job = _answered_job()
    async with rig.worker(apps=asking(job)):
        handle, url, _, _ = await _ask(rig)
        page, said = await _page(browser)

        await page.goto(url)
        await expect(page.locator("h1")).to_have_text("A question for you")
        await page.select_option("select[name='field:region']", "AMER")
        await page.fill("input[name='field:rows']", "42")
        await page.check("input[name='field:notify']")
        await page.check("input[name='field:formats'][value='csv']")
        await page.fill("#responder", "ana")
        await page.click("button[value=accept]")
        await expect(page.locator("h1")).to_have_text("Answered")
        await expect(page.locator(".banner")).to_contain_text("The job has your answer.")
        await asyncio.wait_for(handle.result(), WITHIN)

    [answer] = job.answers
    assert answer.content == {"region": "AMER", "rows": 42, "notify": True, "formats": ["csv"]}
    assert said == []
