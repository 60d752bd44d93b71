"""The web view in headless Chromium from Debian's packages (``chromium``, ``chromium-driver``),
driven by Selenium, against a real uvicorn server on 127.0.0.1 and a run log holding a recorded
race: every page loads with no console error and no request leaving the server, the race shows
its branches side by side with the verdict, a model-written ``<script>`` is shown as text and
never runs, and the search form finds runs. Screenshots go to ``$PHI_ARTIFACTS`` (else the
test's tmp dir)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phi_core.config import plan_race
from phi_core.runlog import RunLog, RunRecorder
from phi_core.testing import Reply, ScriptedProvider
from phi_core.view import ViewData, ViewServer

from .chromium import CHROMEDRIVER, CHROMIUM, chromium_options
from .conftest import XSS, Recorded

pytestmark = pytest.mark.browser


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("PHI_ARTIFACTS") or tmp_path / "artifacts")
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        pytest.skip(
            f"{' and '.join(missing)} not installed: `apt-get install chromium chromium-driver` "
            "(Debian's packages) runs the web view's browser tests."
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = chromium_options(
        f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,1500"
    )
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def server(recorded: Recorded) -> Iterator[ViewServer]:
    with ViewServer(ViewData(recorded.log_path, recorded.state)) as running:
        yield running


def open_page(driver: Any, server: ViewServer, fragment: str) -> Any:
    """Load ``#fragment`` and wait until the page has rendered it (or its error)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(server.url + "#" + fragment)
    WebDriverWait(driver, 15).until(
        lambda d: d.find_element(By.ID, "main").get_attribute("data-ready") == fragment
    )
    return driver.find_element(By.ID, "main")


def stray_values(main: Any) -> list[str]:
    """``null``/``undefined``/``NaN`` shown as text: a value the page failed to format."""
    return re.findall(r"\b(?:null|undefined|NaN)\b", main.text)


def console_problems(driver: Any) -> list[str]:
    """Console messages of level SEVERE (errors, CSP violations, failed loads) since the last
    call."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def foreign_requests(driver: Any, server: ViewServer) -> list[str]:
    names = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    return [n for n in names if not n.startswith(server.url)]


def test_a_race_shows_its_branches_side_by_side_with_the_verdict(
    browser: Any, server: ViewServer, recorded: Recorded, artifacts: Path
) -> None:
    from selenium.webdriver.common.by import By

    main = open_page(browser, server, f"/runs/{recorded.race_id}")
    cards = main.find_elements(By.CSS_SELECTOR, "#branches article.branch")
    assert [c.find_element(By.TAG_NAME, "h3").text.split(" ★")[0] for c in cards] == [
        "scripted:a",
        "scripted:b",
        "scripted:c",
    ]
    a, b, c = cards
    assert "won" in (b.get_attribute("class") or "") and "★ winner" in b.text
    assert "B: entanglement links two particles' states." in b.text
    assert "auth" in c.text and "bad credentials" in c.text and "error" in c.text
    assert "30 out" in a.text  # usage per branch
    # Side by side: the cards share a row.
    assert a.location["y"] == b.location["y"] == c.location["y"]
    assert a.location["x"] < b.location["x"] < c.location["x"]
    verdict = main.find_element(By.ID, "verdict").text
    assert "Winner: scripted:b" in verdict and "response 2" in verdict
    assert "scripted:judge" in verdict
    assert stray_values(main) == []

    # The model-written markup is shown as text, and neither its script nor its handler ran.
    answer = a.find_element(By.CSS_SELECTOR, "pre.answer").text
    assert XSS in answer
    assert browser.execute_script("return window.__phi_xss") is None
    assert main.find_elements(By.CSS_SELECTOR, "script, img[onerror]") == []

    browser.save_screenshot(str(artifacts / "view-race.png"))
    assert (artifacts / "view-race.png").stat().st_size > 10_000
    assert console_problems(browser) == []
    assert foreign_requests(browser, server) == []


def test_every_page_loads_without_console_errors(
    browser: Any, server: ViewServer, recorded: Recorded, artifacts: Path
) -> None:
    from selenium.webdriver.common.by import By

    pages = {
        "/": ("runs", lambda m: len(m.find_elements(By.CSS_SELECTOR, "tr.run-row")) == 3),
        f"/runs/{recorded.bandit_id}": (
            "bandit",
            lambda m: "Router decisions" in m.text and "preview" in m.text,
        ),
        "/routes": ("router", lambda m: recorded.namespace in m.text and "scripted:a" in m.text),
        f"/routes/{recorded.namespace}": (
            "namespace",
            lambda m: "Decisions over time" in m.text and recorded.bandit_id[:10] in m.text,
        ),
        "/selections": ("selections", lambda m: "brute_force" in m.text),
        f"/selections/{recorded.select_id}": (
            "selection",
            lambda m: "solver=scripted:good" in m.text and "on the front" in m.text,
        ),
    }
    for fragment, (name, shows) in pages.items():
        main = open_page(browser, server, fragment)
        assert shows(main), f"{fragment}: {main.text[:400]}"
        assert not main.find_elements(By.CSS_SELECTOR, ".error"), main.text
        assert stray_values(main) == [], fragment
        charts = main.find_elements(By.CSS_SELECTOR, "figure.chart")
        assert len(charts) == (1 if name in ("namespace", "selection") else 0), fragment
        for chart in charts:
            # Inlined SVG with its points (and their tooltips) in the page.
            points = chart.find_elements(By.CSS_SELECTOR, "svg .point")
            assert points and points[0].find_element(By.TAG_NAME, "title"), fragment
        browser.save_screenshot(str(artifacts / f"view-{name}.png"))
        assert console_problems(browser) == [], fragment
        assert foreign_requests(browser, server) == [], fragment


def test_the_search_form_finds_runs_and_a_bad_date_shows_the_servers_message(
    browser: Any, server: ViewServer, recorded: Recorded
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    main = open_page(browser, server, "/")
    field = main.find_element(By.CSS_SELECTOR, "input[name=q]")
    field.send_keys("entanglement")
    main.find_element(By.CSS_SELECTOR, "form.search button[type=submit]").click()
    WebDriverWait(browser, 15).until(
        lambda d: d.find_element(By.ID, "main").get_attribute("data-ready") == "/?q=entanglement"
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.run-row")
    assert [r.get_attribute("data-id") for r in rows] == [recorded.race_id]
    assert "1–1 of 1 runs" in browser.find_element(By.CSS_SELECTOR, ".pager").text

    # Pages: two runs, then "Older →" shows the third.
    open_page(browser, server, "/?limit=2")
    first = [
        r.get_attribute("data-id") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run-row")
    ]
    browser.find_element(By.XPATH, "//button[contains(., 'Older')]").click()
    WebDriverWait(browser, 15).until(
        lambda d: d.find_element(By.ID, "main").get_attribute("data-ready") == "/?limit=2&offset=2"
    )
    rest = [
        r.get_attribute("data-id") for r in browser.find_elements(By.CSS_SELECTOR, "tr.run-row")
    ]
    assert first == [recorded.select_id, recorded.bandit_id] and rest == [recorded.race_id]
    assert "3–3 of 3 runs" in browser.find_element(By.CSS_SELECTOR, ".pager").text

    main = open_page(browser, server, "/?since=someday")
    assert "Cannot read 'someday' as a time" in main.find_element(By.CSS_SELECTOR, ".error").text
    # The 400 itself is logged by the browser as a failed load; nothing else is.
    problems = console_problems(browser)
    assert all("400" in p for p in problems), problems


async def test_a_pairwise_race_shows_each_pair_in_both_orders_and_the_flip_rate(
    browser: Any, recorded: Recorded, artifacts: Path, strict_loop: list[dict[str, Any]]
) -> None:
    from selenium.webdriver.common.by import By

    # A judge that always prefers whichever answer it is shown first: every pair flips.
    race = plan_race(
        models=["scripted:a", "scripted:b"],
        judge="scripted:judge",
        strategy="pairwise",
        providers={
            f"scripted:{name}": ScriptedProvider(name=name, default=Reply(reply))
            for name, reply in (("a", "Answer A."), ("b", "Answer B."), ("judge", "1"))
        },
    )
    with RunLog(recorded.log_path) as log:
        recorder = RunRecorder(log, prompt="Which?", plan=race)
        race_id = recorder.finish(await race.run("Which?", events=recorder)).id
    with ViewServer(ViewData(recorded.log_path, recorded.state)) as server:
        main = open_page(browser, server, f"/runs/{race_id}")
        verdict = main.find_element(By.ID, "verdict")
        assert "Flip rate\n100 %" in verdict.text
        (row,) = verdict.find_elements(By.CSS_SELECTOR, "table.pairs tbody tr")
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        assert cells == ["scripted:a vs scripted:b", "scripted:a", "scripted:b", "undecided", "yes"]
        assert stray_values(main) == []
        browser.save_screenshot(str(artifacts / "view-pairwise.png"))
        assert console_problems(browser) == []
