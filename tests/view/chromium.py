"""Debian's headless Chromium for the web view's browser tests and for the docs' capture script
(``docs/captures/capture_view.py``): where it is installed and the options both drive it with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def chromium_options(*extra: str) -> Any:
    """Selenium options for :data:`CHROMIUM` with :data:`FLAGS`, then ``extra`` flags."""
    from selenium.webdriver.chrome.options import Options

    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, *extra):
        options.add_argument(flag)
    return options
