"""AskForMore under the ASGI middleware, for real: examples/escalation_app.py under uvicorn, and a
person deciding on the ApprovalQueue page in headless chromium. A request at its step limit waits;
approved, it completes (200) with the raised limit; rejected, it ends with the ordinary 429.

Needs ``/usr/bin/chromium`` and ``/usr/bin/chromedriver``: fails, not skips, when CI=true.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from ._servers import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
TOKEN = "escalation-test-token-abcdefghijklmnop"
AUTH = {"authorization": f"Bearer {TOKEN}"}
HANG_GUARD_S = 60.0


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        if os.environ.get("CI") == "true":
            pytest.fail("chromium and chromedriver are not installed (CI=true: the page test must run)")
        pytest.skip("chromium/chromedriver not installed")
    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
        "--window-size=1200,900", f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """``uvicorn examples.escalation_app:app`` with one approver, alice."""
    port = free_port()
    env = {**os.environ, "APPROVERS": f"alice={TOKEN}"}
    args = [sys.executable, "-m", "uvicorn", "examples.escalation_app:app", "--host", "127.0.0.1"]
    args += ["--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + HANG_GUARD_S
    try:
        with httpx.Client(timeout=5) as client:
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.poll() is not None and proc.stderr else ""
                    raise RuntimeError(f"uvicorn did not start: {err[-2000:]}")
                try:
                    client.get(url + "/searches").raise_for_status()
                    break
                except httpx.HTTPError:
                    time.sleep(0.05)
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


class Research:
    """``POST /research`` in a background thread: it waits for a person."""

    def __init__(self, url: str, steps: int) -> None:
        self._outcome: list[httpx.Response | BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(url, steps), daemon=True)
        self._thread.start()

    def _run(self, url: str, steps: int) -> None:
        try:
            with httpx.Client(timeout=HANG_GUARD_S) as client:
                self._outcome.append(client.post(url + "/research", params={"steps": steps}))
        except BaseException as exc:
            self._outcome.append(exc)

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> httpx.Response:
        self._thread.join(HANG_GUARD_S)
        (outcome,) = self._outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def pending(url: str) -> dict[str, Any]:
    deadline = time.monotonic() + HANG_GUARD_S
    with httpx.Client(timeout=10) as client:
        while time.monotonic() < deadline:
            found: list[dict[str, Any]] = client.get(url + "/approvals/", headers=AUTH).json()["pending"]
            if found:
                (only,) = found
                return only
            time.sleep(0.05)
    raise AssertionError("no escalation became pending")


def searches(url: str) -> int:
    return int(httpx.get(url + "/searches", timeout=10).json()["searches"])


def test_a_person_raises_the_limit_on_the_page_and_the_request_completes(
    browser: WebDriver, server: str, tmp_path: Path
) -> None:
    wait = WebDriverWait(browser, 30)
    browser.get(f"{server}/approvals/")
    wait.until(ec.presence_of_element_located((By.ID, "token"))).send_keys(TOKEN)
    browser.find_element(By.ID, "sign-in").click()
    wait.until(ec.presence_of_element_located((By.ID, "refresh")))

    # Approve: the request, waiting at its limit of 3 steps, gets 5 more and completes its 5 searches.
    before = searches(server)
    call = Research(server, 5)
    asked = pending(server)
    assert asked["tool"] == "raise max_steps" and asked["arguments"]["add_steps"] == 5
    assert asked["arguments"]["context"] == "/research" and asked["arguments"]["limit_value"] == 3
    time.sleep(0.3)
    assert not call.done and searches(server) - before == 3  # held at the limit, the 4th not run
    browser.get(f"{server}/approvals/")
    card = wait.until(ec.presence_of_element_located((By.ID, f"request-{asked['id']}")))
    assert "raise max_steps" in card.text and "/research" in card.text and "3/3 steps" in card.text
    browser.save_screenshot(str(tmp_path / "escalation-page.png"))
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "p.empty")))
    response = call.result()
    assert response.status_code == 200
    assert response.json() == {"notes": 5, "steps_used": 5, "max_steps": 8}
    assert searches(server) - before == 5

    # Reject with a reason: the ordinary 429, the decision in its detail, no step past the limit.
    before = searches(server)
    call = Research(server, 5)
    asked = pending(server)
    browser.get(f"{server}/approvals/")
    card = wait.until(ec.presence_of_element_located((By.ID, f"request-{asked['id']}")))
    card.find_element(By.NAME, "message").send_keys("enough for today")
    card.find_element(By.CSS_SELECTOR, "button.reject").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "p.empty")))
    response = call.result()
    assert response.status_code == 429
    problem = response.json()
    assert problem["reason"] == "step_limit"
    assert "asked for more: rejected by alice: enough for today" in problem["detail"]
    assert searches(server) - before == 3
