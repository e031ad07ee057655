"""Headless Debian chromium through chromedriver (selenium), for the tests that open pages as a user.

Needs ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (Debian's chromium and chromium-driver
packages; .ci/run installs them). Missing, a test using :func:`headless_chromium` fails when
CI=true (there it must run) and is skipped elsewhere.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

__all__ = ["CHROMEDRIVER", "CHROMIUM", "headless_chromium", "require_binaries"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def require_binaries(*paths: str) -> None:
    """Fail (CI=true) or skip (elsewhere) the calling test unless every path is an executable."""
    missing = [path for path in paths if not os.access(path, os.X_OK)]
    if not missing:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"not installed: {', '.join(missing)} (CI=true: the browser tests must run)")
    pytest.skip(f"not installed: {', '.join(missing)}")


@contextmanager
def headless_chromium(profile: Path, *, window_size: str = "1200,900") -> Iterator[WebDriver]:
    """A headless chromium with its own profile directory, quit on exit."""
    require_binaries(CHROMIUM, CHROMEDRIVER)
    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--window-size={window_size}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
