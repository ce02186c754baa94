"""The console in a real headless Chromium against a gateway process and the channels'
fakes: the token form, a red account, a failed send retried and arriving once, a session
written into, config and logs with no secret, the live stream through a restart, and a
WeChat QR login. The ``browser`` fixture is in conftest.py.

With ``CHATKERNEL_SCREENSHOTS=DIR`` the pages are saved there as ``console-*.png``
(``scripts/console-screenshots`` makes docs/images with it).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from chatkernel.testing import gateway_home, gateway_process, post_json as post
from chatkernel.testing.process import devserver, free_port, wait_for_messages

TOKEN = "console-browser-token-5f4e3d2c1b0a"
DOWN_TOKEN = "123456789:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
RED, GREEN = "rgba(214, 69, 69, 1)", "rgba(31, 157, 85, 1)"
SHOTS = os.environ.get("CHATKERNEL_SCREENSHOTS")


def screenshot(browser, name: str, width: int = 1280, height: int = 900) -> None:
    if SHOTS:
        browser.set_window_size(width, height)
        browser.save_screenshot(str(Path(SHOTS) / f"console-{name}.png"))
        browser.set_window_size(1280, 900)


def control(url: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def wait(browser, condition, timeout: float = 10.0):
    """``condition`` once it holds; the pages redraw as the gateway changes, so an
    element gone meanwhile is looked up again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, poll_frequency=0.1, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException)).until(condition)


def css(browser, selector: str):
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, selector)


def click_link(browser, text: str) -> None:
    from selenium.webdriver.common.by import By

    browser.find_element(By.LINK_TEXT, text).click()


@pytest.mark.slow
def test_the_console_shows_and_acts_on_a_gateway(tmp_path, browser):
    from selenium.webdriver.common.by import By

    with devserver("chatkernel_telegram.devserver") as fake:
        base = fake["base_url"]
        port = free_port()
        home = gateway_home(tmp_path / "home", f"""
[gateway]
control_token = "{TOKEN}"

[channels.webchat.accounts.default]

[channels.telegram.accounts.main]
bot_token = "{fake['token']}"
api_base = "{base}"
allow_from = ["777"]

[channels.telegram.accounts.down]
bot_token = "{DOWN_TOKEN}"
api_base = "http://127.0.0.1:1"
""")
        secrets = (TOKEN, fake["token"], DOWN_TOKEN)
        with gateway_process(home, "--listen", f"127.0.0.1:{port}") as gateway:
            url = gateway.url
            # The token form.
            browser.get(f"{url}/ui/")
            field = wait(browser, lambda b: b.find_element(By.ID, "token"))
            label = browser.find_element(By.CSS_SELECTOR, "label[for=token]")
            assert label.text == "Gateway token" and field.is_displayed()
            screenshot(browser, "token")
            field.send_keys("not the token")
            browser.find_element(By.CSS_SELECTOR, "#login button").click()
            wait(browser, lambda b: "refused" in b.find_element(By.ID, "login-error").text)
            field.clear()
            field.send_keys(TOKEN)
            browser.find_element(By.CSS_SELECTOR, "#login button").click()

            # Overview: every account in its colour, the red one red.
            def accounts(b):
                rows = css(b, "#accounts tr.account")
                found = {r.get_attribute("data-account"): r.get_attribute("data-health")
                         for r in rows}
                want = {"webchat:default": "ok", "telegram:main": "ok", "telegram:down": "bad"}
                return rows if found == want else False

            rows = {r.get_attribute("data-account"): r for r in wait(browser, accounts, 20)}
            assert [link.text for link in css(browser, "#nav a")] == [
                "Overview", "Sessions", "Pairing", "Deliveries", "Logins", "Config", "Logs"]
            dot = rows["telegram:down"].find_element(By.CSS_SELECTOR, ".dot")
            assert dot.value_of_css_property("background-color") == RED
            assert rows["webchat:default"].find_element(By.CSS_SELECTOR, ".dot") \
                .value_of_css_property("background-color") == GREEN
            assert "token=" not in browser.current_url  # never left in the address
            screenshot(browser, "overview")
            screenshot(browser, "phone", 390, 844)

            # A send that fails (nobody wrote from chat 777 yet) shows up by itself.
            status, answer = control(url, "/control/send", {
                "channel": "telegram", "account": "main", "to": "777",
                "text": "the reply that failed overnight", "wait": 10})
            assert status == 200 and answer["outcome"] == "failed"
            wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "#failed-count strong")
                 .text == "1", 3)

            # Deliveries: the failure, retried once the chat exists, arrives once.
            click_link(browser, "Deliveries")
            row = wait(browser, lambda b: (css(b, "#failed tr.failure") or [False])[0])
            assert "the reply that failed overnight" in row.text
            assert "chat not found" in row.find_element(By.CSS_SELECTOR, ".reason").text
            screenshot(browser, "deliveries")
            assert post(f"{base}/_fake/messages", {"chat_id": 777, "from_id": 777,
                                                    "text": "I am here"})[0] == 200
            wait_for_messages(f"{base}/_fake/sent?chat_id=777", 1, timeout=10)  # the echo
            entry_id = int(row.get_attribute("data-id"))
            row.find_element(By.XPATH, ".//button[text()='Retry']").click()
            wait(browser, lambda b: css(b, "#failed tr.failure") == [])
            wait_for_messages(f"{base}/_fake/sent?chat_id=777", 2, timeout=10)
            status, _ = control(url, "/control/deliveries/retry", {"id": entry_id})
            assert status == 404  # taken once: a second retry finds nothing
            sent = wait_for_messages(f"{base}/_fake/sent?chat_id=777", 2, timeout=1)
            assert [m["text"] for m in sent] == ["I am here", "the reply that failed overnight"]

            # Sessions: the chat's transcript, and a message sent into it.
            click_link(browser, "Sessions")
            link = wait(browser, lambda b: b.find_element(
                By.CSS_SELECTOR, '[data-session="telegram:main:777"] a'))
            link.click()
            wait(browser, lambda b: "I am here" in b.find_element(By.ID, "transcript").text)
            browser.find_element(By.ID, "send-text").send_keys("hello from the console")
            browser.find_element(By.CSS_SELECTOR, "#send-form button").click()
            wait(browser, lambda b: b.find_element(By.ID, "send-status").text == "sent: sent")
            sent = wait_for_messages(f"{base}/_fake/sent?chat_id=777", 3, timeout=10)
            assert sent[-1]["text"] == "hello from the console"
            wait(browser, lambda b: "hello from the console" in b.find_element(
                By.ID, "transcript").text)
            screenshot(browser, "sessions")

            # Pairing: a stranger's request shows up by itself; approved, they are answered.
            click_link(browser, "Pairing")
            wait(browser, lambda b: b.find_element(By.ID, "pairing").text)
            post(f"{base}/_fake/messages", {"chat_id": 888, "from_id": 888, "text": "let me in"})
            request = wait(browser, lambda b: (css(b, "#requests tr[data-code]") or [False])[0], 3)
            code = request.get_attribute("data-code")
            notice = wait_for_messages(f"{base}/_fake/sent?chat_id=888", 1, timeout=10)
            assert code in notice[0]["text"]
            screenshot(browser, "pairing")
            request.find_element(By.XPATH, ".//button[text()='Approve']").click()
            wait(browser, lambda b: css(b, '#allowed tr[data-sender="888"]'))
            assert wait_for_messages(f"{base}/_fake/sent?chat_id=888", 2, timeout=10)
            post(f"{base}/_fake/messages", {"chat_id": 888, "from_id": 888, "text": "hello bot"})
            answered = wait_for_messages(f"{base}/_fake/sent?chat_id=888", 3, timeout=10)
            assert answered[-1]["text"] == "hello bot"  # the echo agent answers them now

            # Config and logs: secrets masked, the audit's findings, live lines.
            click_link(browser, "Config")
            wait(browser, lambda b: b.find_element(By.ID, "validation").text.startswith("valid"))
            assert css(browser, "#audit tr")
            screenshot(browser, "config")
            click_link(browser, "Logs")
            wait(browser, lambda b: "ready on" in b.find_element(By.ID, "log-lines").text)
            screenshot(browser, "logs")
            for page in ("overview", "sessions", "deliveries", "config", "logs", "pairing"):
                browser.get(f"{url}/ui/#{page}")
                wait(browser, lambda b: b.find_element(By.ID, "main").text.strip())
                for secret in secrets:
                    assert secret not in browser.page_source, (page, secret)

            click_link(browser, "Overview")
            wait(browser, lambda b: b.find_element(By.ID, "live").text == "live")
        # The gateway restarts on the same address: the page reconnects by itself.
        wait(browser, lambda b: b.find_element(By.ID, "live").text != "live")
        with gateway_process(home, "--listen", f"127.0.0.1:{port}") as gateway:
            wait(browser, lambda b: b.find_element(By.ID, "live").text == "live", 15)
            control(url, "/control/send", {"channel": "telegram", "account": "main",
                                           "to": "779", "text": "fails again", "wait": 10})
            wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "#failed-count strong")
                 .text == "1", 3)


@pytest.mark.slow
def test_a_wechat_qr_login_in_the_console(tmp_path, browser):
    from selenium.webdriver.common.by import By

    with devserver("chatkernel_wechat.devserver") as fake:
        base = fake["base_url"]
        home = gateway_home(tmp_path / "home", "[channels.webchat.accounts.default]\n")
        with gateway_process(home) as gateway:
            info = json.loads((home / "gateway.json").read_text())
            browser.get(f"{gateway.url}/ui/#token={info['token']}")
            click_link(wait(browser, lambda b: b if css(b, "#nav:not([hidden])") else False),
                       "Logins")
            button = wait(browser, lambda b: b.find_element(
                By.CSS_SELECTOR, "button[data-channel=wechat]"))
            browser.find_element(By.CSS_SELECTOR, "input[name=api_base]").send_keys(base)
            button.click()

            def state(b):
                badges = css(b, ".login-run .badge")
                return badges[0].text if badges else None

            wait(browser, lambda b: css(b, ".login-run svg.qr path"))
            first = browser.find_element(By.CSS_SELECTOR, ".login-run svg.qr path") \
                .get_attribute("d")
            screenshot(browser, "logins")
            assert post(f"{base}/_fake/qr", {"status": "expired"})[0] == 200
            wait(browser, lambda b: css(b, ".login-run svg.qr path") and b.find_element(
                By.CSS_SELECTOR, ".login-run svg.qr path").get_attribute("d") != first)
            assert post(f"{base}/_fake/qr", {"status": "scaned"})[0] == 200
            wait(browser, lambda b: state(b) == "scanned")
            assert post(f"{base}/_fake/qr", {"status": "confirmed"})[0] == 200
            wait(browser, lambda b: state(b) == "live", 20)
            assert not css(browser, ".login-run svg.qr")
            click_link(browser, "Overview")
            wait(browser, lambda b: [r for r in css(b, "#accounts tr.account")
                                     if r.get_attribute("data-account") == "wechat:main"])
        config = (home / "config.toml").read_text()
        assert "[channels.wechat.accounts.main]" in config
