"""`kimicode web`'s page in a real browser: Debian's chromium (installed by .ci/run) driven by Playwright's
Python driver, against the server on a thread of this process and the fake model server. Open the page,
start a session, send a prompt and see the streamed answer, approve a command, see an edit's diff, open
a two-branch exploration side by side; screenshots are saved as artifacts and one is checked for content
where the conversation should be."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT

from kimicode.serve.manager import ServeConfig
from kimicode.serve.server import ThreadedServer

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("KIMICODE_ARTIFACTS", ROOT / "test-artifacts")) / "web"


@pytest.fixture
def page(live: ThreadedServer) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra has it)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 900})
            tab.set_default_timeout(30_000)
            yield tab
        finally:
            browser.close()


def shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def region_has_content(path: Path, box: dict[str, float]) -> bool:
    """True when the screenshot's region `box` is not blank: several colours, and enough pixels unlike the
    background (text, bars, borders)."""
    from PIL import Image

    with Image.open(path) as image:
        region = image.convert("RGB").crop(
            (int(box["x"]), int(box["y"]), int(box["x"] + box["width"]), int(box["y"] + box["height"]))
        )
        colours = region.getcolors(maxcolors=1 << 20) or []
        background = max(colours)[1] if colours else (0, 0, 0)
        inked = sum(n for n, c in colours if sum(abs(a - b) for a, b in zip(c, background, strict=True)) > 60)
        return len(colours) > 8 and inked > 200


def test_the_page_runs_a_session_end_to_end(page: Any, live: ThreadedServer, workspace: Path) -> None:
    page.goto(f"{live.url}/#token={live.token}")
    assert "#token" not in page.url  # taken out of the address bar at once
    page.fill("#workspace", str(workspace))
    page.select_option("#mode", "default")
    page.click("#create")
    page.wait_for_selector("#session:not([hidden])")

    page.fill("#prompt", "hello from the browser")
    page.press("#prompt", "Enter")
    page.wait_for_selector(".answer:has-text('echo: hello from the browser')")
    reasoning = page.locator("details.reasoning:not([hidden])").first
    assert reasoning.get_attribute("open") is None  # folded
    assert reasoning.is_visible() and not reasoning.locator(".reasoning-text").is_visible()
    reasoning.locator("summary").click()
    assert reasoning.locator(".reasoning-text").inner_text() == "thinking about hello from the browser"
    shot(page, "1-answer")

    page.fill("#prompt", "run echo approved > approved.txt")
    page.click("#send")
    page.wait_for_selector(".approval code:has-text('echo approved > approved.txt')")
    shot(page, "2-approval")
    page.click(".approval button[data-decision='allow']")
    page.wait_for_selector(".tool.done .tool-args:has-text('echo approved')")
    page.locator(".status.success").nth(1).wait_for()  # the page's CSP forbids eval: no wait_for_function
    assert (workspace / "approved.txt").read_text() == "approved\n"

    page.fill("#prompt", "write page.txt made in the browser")
    page.click("#send")
    page.wait_for_selector(".approval pre.diff:has-text('+made in the browser')")  # the edit's diff, before
    page.click(".approval button[data-decision='allow']")
    page.wait_for_selector(".tool.done pre.diff:has-text('+made in the browser')")  # and with the result
    page.locator(".status.success").nth(2).wait_for()
    assert (workspace / "page.txt").read_text() == "made in the browser"
    conversation = shot(page, "3-diff")
    box = page.locator("#turns").bounding_box()
    assert box is not None and box["height"] > 100
    assert region_has_content(conversation, box)

    page.click("#tabs button[data-tab='changes']")
    page.wait_for_selector("#diff:has-text('page.txt')")
    page.click("#tabs button[data-tab='context']")
    assert page.locator(".ctx-row").count() >= 4  # three turns and now
    assert page.locator(".ctx-row .seg.c-system").count() >= 4
    shot(page, "4-context")
    page.click("#tabs button[data-tab='cost']")
    assert page.locator("#cost-table tbody tr").count() == 4  # three turns and the total
    shot(page, "5-cost")


def test_the_page_shows_branches_side_by_side(page: Any, config: ServeConfig, workspace: Path) -> None:
    (workspace / "base.txt").write_text("base\n")
    with ThreadedServer(config) as running:
        page.goto(f"{running.url}/#token={running.token}")
        page.fill("#workspace", str(workspace))
        page.select_option("#mode", "accept-edits")
        page.click("#create")
        page.wait_for_selector("#session:not([hidden])")
        page.click("#tabs button[data-tab='branches']")
        page.fill("#explore-prompt", "write answer.txt from a branch")
        page.fill("#explore-verify", "test -f answer.txt")
        page.click("#explore-run")
        page.wait_for_selector(".branch-grid .branch.chosen", timeout=90_000)
        cards = page.locator(".branch-grid .branch")
        assert cards.count() == 2
        first, second = cards.nth(0).bounding_box(), cards.nth(1).bounding_box()
        assert first is not None and second is not None
        assert abs(first["y"] - second["y"]) < 5 and second["x"] > first["x"] + first["width"] - 5  # side by side
        assert page.locator(".branch .b-verify.ok").count() == 2
        assert page.locator(".branch pre.diff:has-text('+from a branch')").count() == 2
        shot(page, "6-branches")
    assert (workspace / "answer.txt").read_text() == "from a branch"
