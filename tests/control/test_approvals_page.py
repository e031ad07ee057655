"""The approvals page in headless Debian chromium (selenium): sign in once, then the buttons decide.

Needs ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (tests/support/browser.py): the test fails,
not skips, when CI=true and they are missing.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from ..support.browser import headless_chromium
from ._servers import TOKEN, AgentCall, ApprovalsServer, wait_pending

_addresses = (f"page{n}@example.com" for n in itertools.count())


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with headless_chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApprovalsServer]:
    with ApprovalsServer(tmp_path_factory.mktemp("page") / "runs.jsonl") as running:
        yield running


def _wait(driver: WebDriver) -> WebDriverWait[WebDriver]:
    return WebDriverWait(driver, 30)


def _open_request(driver: WebDriver, server: ApprovalsServer, request_id: str) -> None:
    driver.get(f"{server.url}/approvals/")
    _wait(driver).until(ec.presence_of_element_located((By.ID, f"request-{request_id}")))


def test_sign_in_once_then_approve_reject_and_edit(
    browser: WebDriver, server: ApprovalsServer, tmp_path: Path
) -> None:
    # Sign in through the form: the token goes in a POST body, the browser keeps a session cookie.
    browser.get(f"{server.url}/approvals/")
    token_field = _wait(browser).until(ec.presence_of_element_located((By.ID, "token")))
    token_field.send_keys(TOKEN)
    browser.find_element(By.ID, "sign-in").click()
    _wait(browser).until(ec.presence_of_element_located((By.ID, "refresh")))
    assert TOKEN not in browser.current_url
    (cookie,) = browser.get_cookies()
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and TOKEN not in cookie["value"]

    # Approve: the waiting request answers 200 and the email went out once.
    to = next(_addresses)
    call = AgentCall(server.url, to=to)
    (pending,) = wait_pending(server.url)
    _open_request(browser, server, pending["id"])
    card = browser.find_element(By.ID, f"request-{pending['id']}")
    assert "send_email" in card.text and to in card.text
    browser.save_screenshot(str(tmp_path / "approvals-page.png"))
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    _wait(browser).until(ec.presence_of_element_located((By.CSS_SELECTOR, "p.empty")))
    assert call.result().status_code == 200
    assert len(server.runs_of(to=to)) == 1

    # Reject with a reason: 403, the tool never ran.
    to = next(_addresses)
    call = AgentCall(server.url, to=to)
    (pending,) = wait_pending(server.url)
    _open_request(browser, server, pending["id"])
    card = browser.find_element(By.ID, f"request-{pending['id']}")
    card.find_element(By.NAME, "message").send_keys("wrong recipient")
    card.find_element(By.CSS_SELECTOR, "button.reject").click()
    _wait(browser).until(ec.presence_of_element_located((By.CSS_SELECTOR, "p.empty")))
    response = call.result()
    assert response.status_code == 403 and "wrong recipient" in response.json()["detail"]
    assert server.runs_of(to=to) == []

    # Edit the arguments, then run: the tool ran once, with what the person typed.
    to = next(_addresses)
    call = AgentCall(server.url, to=to)
    (pending,) = wait_pending(server.url)
    _open_request(browser, server, pending["id"])
    card = browser.find_element(By.ID, f"request-{pending['id']}")
    card.find_element(By.TAG_NAME, "summary").click()
    area = card.find_element(By.NAME, "arguments")
    area.clear()
    area.send_keys(json.dumps({"to": to, "body": "Edited by a reviewer."}))
    card.find_element(By.CSS_SELECTOR, "button.edit").click()
    _wait(browser).until(ec.presence_of_element_located((By.CSS_SELECTOR, "p.empty")))
    assert call.result().status_code == 200
    (run,) = server.runs_of(to=to)
    assert run["body"] == "Edited by a reviewer."

    # Deciding twice (a stale page): the second click gets the 409 notice, nothing runs again.
    to = next(_addresses)
    call = AgentCall(server.url, to=to)
    (pending,) = wait_pending(server.url)
    _open_request(browser, server, pending["id"])
    stale = browser.find_element(By.ID, f"request-{pending['id']}")
    main = browser.current_window_handle
    browser.execute_script("window.open(arguments[0], '_blank')", f"{server.url}/approvals/")
    _wait(browser).until(lambda driver: len(driver.window_handles) == 2)
    (other,) = [handle for handle in browser.window_handles if handle != main]  # no order is promised
    browser.switch_to.window(other)
    _wait(browser).until(ec.presence_of_element_located((By.ID, f"request-{pending['id']}")))
    browser.find_element(By.CSS_SELECTOR, f"#request-{pending['id']} button.approve").click()
    _wait(browser).until(ec.presence_of_element_located((By.CSS_SELECTOR, "p.empty")))
    browser.close()
    browser.switch_to.window(main)
    stale.find_element(By.CSS_SELECTOR, "button.approve").click()
    notice = _wait(browser).until(ec.presence_of_element_located((By.CSS_SELECTOR, "p.notice")))
    assert "already decided" in notice.text
    assert call.result().status_code == 200 and len(server.runs_of(to=to)) == 1


def _signed_in(driver: WebDriver, server: ApprovalsServer) -> None:
    driver.get(f"{server.url}/approvals/")
    fields = driver.find_elements(By.ID, "token")
    if fields:
        fields[0].send_keys(TOKEN)
        driver.find_element(By.ID, "sign-in").click()
    _wait(driver).until(ec.presence_of_element_located((By.ID, "signed-in")))


def test_bidi_and_zero_width_characters_are_shown_not_rendered(
    browser: WebDriver, server: ApprovalsServer
) -> None:
    _signed_in(browser, server)
    assert browser.find_element(By.ID, "signed-in").text == "Signed in as default"
    # What would run is "alice@example.com<RLO><ZWSP>moc.evil": it must not read as something else.
    to = "alice@example.com\u202e\u200bmoc.evil"
    call = AgentCall(server.url, to=to)
    (pending,) = wait_pending(server.url)
    _open_request(browser, server, pending["id"])
    card = browser.find_element(By.ID, f"request-{pending['id']}")
    shown = card.find_element(By.CSS_SELECTOR, "pre.arguments")
    marks = shown.find_elements(By.CSS_SELECTOR, "mark.hidden-char")
    assert [m.text for m in marks] == ["\\u202e", "\\u200b"]
    assert marks[0].get_attribute("title") == "U+202E RIGHT-TO-LEFT OVERRIDE"
    assert marks[0].value_of_css_property("background-color") == "rgba(255, 213, 213, 1)"  # highlighted
    assert "\u202e" not in shown.text and "\u200b" not in shown.text
    assert "alice@example.com\\u202e\\u200bmoc.evil" in shown.text  # in order, left to right
    card.find_element(By.CSS_SELECTOR, "button.reject").click()
    _wait(browser).until(ec.presence_of_element_located((By.CSS_SELECTOR, "p.empty")))
    assert call.result().status_code == 403 and server.runs_of(to=to) == []
