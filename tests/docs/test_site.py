"""The built site in headless Debian chromium: the home page, its navigation and a working search.

Builds the site with ``mkdocs build --strict`` (or takes the one the docs env just built, named by
``VERONICA_DOCS_SITE``), serves it on 127.0.0.1 and opens it through chromedriver (selenium), as a
reader would. Fails, not skips, when CI=true and chromium or chromedriver is missing.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from ..support.browser import headless_chromium, require_binaries

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = [
    "Home", "Getting started", "Concepts", "Integrations", "Checks and control", "Audit and replay",
    "Scaling out", "Observability", "Reference", "Performance", "Security", "Development", "Changelog",
]  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = os.environ.get("VERONICA_DOCS_SITE")
    if built and (Path(built) / "index.html").is_file():
        return Path(built)
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return target


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def url(site: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    with headless_chromium(profile, window_size="1440,1000") as driver:  # room for Material's sidebar
        yield driver


def test_home_page_has_title_navigation_and_a_search_that_finds_tenants(
    browser: WebDriver, url: str, tmp_path: Path
) -> None:
    browser.get(url)
    wait = WebDriverWait(browser, 30)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "nav.md-nav--primary")))
    shot = tmp_path / "home.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert browser.title == "veronica-mw"
    assert browser.find_element(By.TAG_NAME, "h1").text == "veronica-mw"

    primary = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary > ul")
    items = primary.find_elements(By.XPATH, "./li")
    labels = [" ".join((item.get_attribute("textContent") or "").split()) for item in items]
    firsts = [label.split(" ")[0] for label in labels]
    for expected in TOP_LEVEL:
        assert any(label.startswith(expected) for label in labels), f"{expected!r} not in the nav: {firsts}"
    sidebar = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary").text
    assert "Getting started" in sidebar  # rendered, not only in the DOM

    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.click()
    box.send_keys("tenant")
    found = (By.CSS_SELECTOR, ".md-search-result__item a.md-search-result__link")
    results = wait.until(ec.presence_of_all_elements_located(found))
    hrefs = [link.get_attribute("href") or "" for link in results]
    assert any("/scaling-out/" in href for href in hrefs), hrefs
    browser.save_screenshot(str(tmp_path / "search.png"))


def test_a_missing_browser_fails_under_ci_and_skips_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = str(tmp_path / "chromium")  # never created
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_binaries(sys.executable, missing)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="chromium"):
        require_binaries(missing)
    require_binaries(sys.executable)  # present: neither
