"""The /status page in a real headless Chromium: accounts, health colours, last events.

The ``browser`` fixture is in conftest.py.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from chatkernel.testing.process import gateway_process

CONFIG = """
[channels.webchat.accounts.default]

[channels.telegram.accounts."<b>down</b>"]
bot_token = "123456789:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
api_base = "http://127.0.0.1:1"
"""

GREEN, RED = "rgba(31, 157, 85, 1)", "rgba(214, 69, 69, 1)"


@pytest.mark.slow
def test_status_page_shows_accounts_in_their_health_colours(tmp_path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG)
    with gateway_process(home) as gateway:
        request = urllib.request.Request(
            f"{gateway.url}/webchat/messages", method="POST",
            data=json.dumps({"chat_id": "c1", "user_id": "u1", "text": "hi"}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 202

        def loaded(driver):
            driver.get(gateway.url + "/status")
            rows = driver.find_elements(By.CSS_SELECTOR, "tr.account")
            health = {row.get_attribute("data-account"): row.get_attribute("data-health")
                      for row in rows}
            webchat_row = next((r for r in rows
                                if r.get_attribute("data-account") == "webchat:default"), None)
            cells = [] if webchat_row is None else webchat_row.find_elements(By.TAG_NAME, "td")
            # the last inbound has been seen and the echo sent (the page may show one first)
            fresh = bool(cells) and "never" not in cells[4].text + cells[6].text
            done = health.get("telegram:<b>down</b>") == "bad" and fresh
            return rows if done else False

        rows = WebDriverWait(browser, 15, poll_frequency=0.3).until(loaded)
        assert browser.title == "chatkernel status — problems"
        assert browser.find_element(By.ID, "overall").text == "Problems"
        by_key = {row.get_attribute("data-account"): row for row in rows}
        bad, good = by_key["telegram:<b>down</b>"], by_key["webchat:default"]
        dot = bad.find_element(By.CSS_SELECTOR, ".dot")
        assert dot.value_of_css_property("background-color") == RED
        assert good.find_element(By.CSS_SELECTOR, ".dot").value_of_css_property(
            "background-color") == GREEN
        # the account name is shown as text, never run as markup
        assert "telegram:<b>down</b>" in bad.text
        assert bad.find_elements(By.TAG_NAME, "b") == []
        assert "cannot connect to the Bot API" in bad.find_element(By.CSS_SELECTOR,
                                                                   ".probe").text
        assert good.find_element(By.CSS_SELECTOR, ".state").text == "running"
        assert good.find_element(By.CSS_SELECTOR, ".restarts").text == "0"
        cells = [cell.text for cell in good.find_elements(By.TAG_NAME, "td")]
        assert cells[4].endswith("ago") and cells[6].endswith("ago")  # last inbound, sent
        problems = browser.find_element(By.ID, "problems").text
        assert "telegram:<b>down</b>: probe failed" in problems
        assert browser.find_element(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]') \
            .get_attribute("content") == "10"
        presence = browser.find_elements(By.CSS_SELECTOR, "#presence tbody tr")
        assert presence[0].get_attribute("data-instance").startswith("gateway-")
