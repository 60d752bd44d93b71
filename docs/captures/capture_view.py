"""Capture docs/captures/view-race.png: the web view of a real race, in Debian's headless
Chromium, at 1400 px wide.

    PHI_HOME=/tmp/demo phi race -s pairwise --max-tokens 120 "In two sentences, why is the sky blue?"
    PHI_HOME=/tmp/demo python docs/captures/capture_view.py [RUN_ID]

The same Chromium options as tests/view/test_browser.py (tests/view/chromium.py) and the same
server; RUN_ID defaults to the newest race.
"""

from __future__ import annotations

import sys
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from phi_core.runlog import RunLog, RunQuery
from phi_core.view import ViewData, ViewServer

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1]))  # the checkout's root, for tests.view.chromium
from tests.view.chromium import CHROMEDRIVER, chromium_options  # noqa: E402


def main() -> None:
    with RunLog(read_only=True) as log:
        run_id = sys.argv[1] if len(sys.argv) > 1 else log.list_runs(RunQuery(kind="race"))[0].id
    options = chromium_options("--hide-scrollbars", "--window-size=1400,1200")
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        with ViewServer(ViewData()) as server:
            for fragment, name in ((f"/runs/{run_id}", "view-race"),):
                driver.get(server.url + "#" + fragment)
                WebDriverWait(driver, 15).until(
                    lambda d, ready=fragment: (
                        d.find_element(By.ID, "main").get_attribute("data-ready") == ready
                    )
                )
                height = driver.execute_script("return document.documentElement.scrollHeight")
                driver.execute_cdp_cmd(
                    "Emulation.setDeviceMetricsOverride",
                    {
                        "width": 1400,
                        "height": min(int(height), 2600),
                        "deviceScaleFactor": 1,
                        "mobile": False,
                    },
                )
                driver.save_screenshot(str(HERE / f"{name}.png"))
                print(HERE / f"{name}.png")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
