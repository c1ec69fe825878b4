"""The dashboard in a real browser: Debian's chromium driven by Playwright,
against repairbot and the emulator served over real HTTP. Sign in through
the emulator's authorization page, see only permitted repositories, open a
run, read its diff, cancel it and watch its status change live (in a second
tab that never reloads). Screenshots of the main pages are taken on the way
(``REPAIRBOT_SCREENSHOT_DIR`` copies them, e.g. to docs/screenshots/)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.async_api import Page, async_playwright, expect

from app.demo.serve import ServerThread, bind, url_of
from app.engine._db import make_engine
from app.engine._runtime import Runtime
from app.web import create_app
from emulator.app import Emulator
from emulator.client import EmulatorClient
from handlers import build_router
from tests.dashboard.conftest import TITLES, populate, registry, sign_in_settings, start_runs
from tests.dashboard.support import People, settle

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
pytestmark = pytest.mark.slow


@dataclass
class Live:
    app_url: str
    runs: dict[str, str]
    people: People
    shots: Path


@pytest.fixture
async def live(tmp_path: Path, sqlite_template: Path) -> AsyncIterator[Live]:
    db = tmp_path / "repairbot.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite:///{db}"
    emu_sock, app_sock = bind(), bind()
    emulator = Emulator(root=tmp_path / "github", public_url=url_of(emu_sock))
    emu_server = ServerThread(emulator.asgi(), emu_sock, name="emulator").start()
    people = People()
    async with EmulatorClient(emu_server.url) as gh:
        registered = await populate(gh, people, tmp_path)
    settings = sign_in_settings(
        registered, tmp_path, github=emu_server.url, public=url_of(app_sock)
    )
    # The served app runs the in-process worker; this runtime only starts runs
    # (the worker's reconciler picks them up from the database).
    client_runtime = Runtime(make_engine(url), registry())
    runs = await start_runs(client_runtime, settings, people)
    app_runtime = Runtime(make_engine(url), registry(), reconcile_interval=0.1, relay_grace=0.2)
    app_server = ServerThread(
        create_app(settings, app_runtime, run_worker=True, router=build_router()),
        app_sock,
        name="repairbot",
    ).start()
    try:
        await settle(client_runtime, list(runs.values()))
        yield Live(app_server.url, runs, people, tmp_path / "shots")
    finally:
        app_server.stop()
        emu_server.stop()
        emulator.close()


async def sign_in(page: Page, live: Live, login: str) -> None:
    await page.goto(f"{live.app_url}/runs")
    # Not signed in: sent to GitHub's (the emulator's) authorization page.
    await expect(page.get_by_role("heading", name="Authorize repairbot")).to_be_visible()
    await page.get_by_label("Username").fill(login)
    await page.get_by_role("button", name="Authorize").click()
    await expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    await expect(page.get_by_text(f"Signed in as @{login}")).to_be_visible()


async def shoot(page: Page, live: Live, name: str) -> None:
    live.shots.mkdir(exist_ok=True)
    path = live.shots / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    copy_to = os.environ.get("REPAIRBOT_SCREENSHOT_DIR")
    if copy_to:
        Path(copy_to).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(copy_to) / path.name)


async def test_sign_in_read_a_diff_and_cancel_live(live: Live) -> None:
    widgets, secret = live.runs["widgets#1"], live.runs["secret#1"]
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 900})
            page = await context.new_page()
            await sign_in(page, live, live.people.maintainer)
            runs_table = page.get_by_role("table")
            await expect(runs_table.get_by_role("link", name=TITLES["widgets#1"])).to_be_visible()
            await expect(runs_table.get_by_text("octo/secret")).to_have_count(0)
            await expect(page.get_by_text("2 runs")).to_be_visible()
            await shoot(page, live, "runs")

            # The private repository's run is not there, even by its address.
            missing = await page.goto(f"{live.app_url}/runs/{quote(secret, safe='')}")
            assert missing is not None and missing.status == 404

            await page.goto(f"{live.app_url}/runs")
            await runs_table.get_by_role("link", name=TITLES["widgets#1"]).click()
            await expect(page.get_by_role("heading", name=f"Run {widgets}")).to_be_visible()
            diff = page.get_by_label("Patch")
            await expect(diff.locator("span.add")).to_have_text("+    return a + b")
            await expect(diff.locator("span.del")).to_have_text("-    return a - b")
            await shoot(page, live, "run")

            # A second tab on the same run, which is never reloaded.
            watcher = await context.new_page()
            await watcher.goto(page.url)
            status = watcher.locator('[data-field="status"]').first
            await expect(status).to_have_text("running")

            await page.get_by_label("Reason").fill("duplicate of #2")
            await page.get_by_role("button", name="Cancel").click()
            await expect(page.get_by_role("status")).to_contain_text("cancel")
            # Server-sent events carry the change to the open tab.
            await expect(status).to_have_text("cancelled", timeout=20_000)
            await expect(watcher.get_by_text("The run has ended")).to_be_visible()
            # The rest of the page followed too, without a reload: the next step,
            # the actions a closed run offers and the history's last event.
            await expect(watcher.get_by_text("Retry starts a new run")).to_be_visible()
            await expect(watcher.get_by_role("button", name="Retry")).to_be_visible()
            await expect(watcher.get_by_role("button", name="Terminate")).to_have_count(0)
            history = watcher.locator("ol.history")  # folded away, but there
            await expect(history.get_by_text("workflow_cancelled")).to_have_count(1)

            await page.goto(f"{live.app_url}/deliveries")
            await expect(page.get_by_role("heading", name="Webhook deliveries")).to_be_visible()
            await shoot(page, live, "deliveries")
        finally:
            await browser.close()


async def test_a_reader_sees_the_run_but_no_actions(live: Live) -> None:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page()
            await sign_in(page, live, live.people.reader)
            await page.get_by_role("link", name=TITLES["widgets#2"]).click()
            await expect(page.get_by_text("not act on it")).to_be_visible()
            await expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
        finally:
            await browser.close()


async def test_the_runs_list_fits_a_phone(live: Live) -> None:
    """390 px wide (a phone): no sideways scrolling, and each run shows its
    issue title, pull request and duration."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": 390, "height": 844})
            page = await context.new_page()
            await sign_in(page, live, live.people.maintainer)
            card = page.locator(f'tr[data-run="{live.runs["widgets#1"]}"]')
            await expect(card.get_by_role("link", name=TITLES["widgets#1"])).to_be_visible()
            await expect(card.get_by_role("link", name="#2")).to_be_visible()  # the PR
            duration = card.locator('td[data-label="Duration"]')
            await expect(duration).to_be_visible()
            await expect(duration).to_contain_text(" s")
            # The locators above see the DOM as soon as it is parsed; the
            # stylesheet may still be loading then (a browser shows nothing
            # before it, but script can measure the unstyled layout). Measure
            # the page the user sees: after its load event.
            await page.wait_for_load_state("load")
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"the page is {width} px wide on a 390 px screen"
            await shoot(page, live, "runs-phone")
        finally:
            await browser.close()
