"""The web chat page in a real headless Chromium: type, send, see the echo.

The ``browser`` fixture is in conftest.py.
"""

from __future__ import annotations

import pytest

from chatkernel.testing.process import gateway_process

@pytest.fixture
def gateway_url(tmp_path):
    with gateway_process(tmp_path / "home") as gateway:
        yield gateway.url


def test_type_send_and_see_the_echo(gateway_url, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(gateway_url + "/")
    assert "chatkernel" in browser.title
    box = browser.find_element(By.ID, "text")
    box.send_keys("hello from the browser")
    browser.find_element(By.ID, "send").click()
    wait = WebDriverWait(browser, 10)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".msg.bot")))
    bot = browser.find_elements(By.CSS_SELECTOR, ".msg.bot")
    user = browser.find_elements(By.CSS_SELECTOR, ".msg.user")
    assert [m.text for m in user] == ["hello from the browser"]
    assert [m.text for m in bot] == ["hello from the browser"]
    # Enter sends too, and markup is shown as text, never run as HTML
    box.send_keys("<b>bold?</b>", Keys.ENTER)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.bot")) == 2)
    last = browser.find_elements(By.CSS_SELECTOR, ".msg.bot")[-1]
    assert last.text == "<b>bold?</b>"
    assert last.find_elements(By.TAG_NAME, "b") == []
    # a reload shows the conversation again (same chat id from localStorage)
    browser.refresh()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.bot")) == 2)
