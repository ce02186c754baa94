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


@pytest.mark.slow
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


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_the_page_keeps_what_was_typed_through_a_gateway_restart(tmp_path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    home, port = tmp_path / "home", free_port()
    listen = ("--listen", f"127.0.0.1:{port}")  # the same address after the restart
    wait = WebDriverWait(browser, 15)

    def texts(css):
        return [m.find_element(By.CSS_SELECTOR, ".text").text
                for m in browser.find_elements(By.CSS_SELECTOR, css)]

    with gateway_process(home, *listen) as gateway:
        browser.get(gateway.url + "/")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute(
            "data-stream") == "open")
        browser.find_element(By.ID, "text").send_keys("before the restart", Keys.ENTER)
        wait.until(lambda d: texts(".msg.bot") == ["before the restart"])
        assert gateway.stop() == 0

    # The gateway is gone: the message stays on the page with its text, says why, and
    # offers a retry.
    browser.find_element(By.ID, "text").send_keys("while it is down", Keys.ENTER)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.user.unsent"))
    unsent = browser.find_element(By.CSS_SELECTOR, ".msg.user.unsent")
    assert unsent.find_element(By.CSS_SELECTOR, ".text").text == "while it is down"
    assert "not sent — gateway unreachable" in unsent.find_element(By.CSS_SELECTOR,
                                                                   ".note").text
    assert "not sent — gateway unreachable" in browser.find_element(By.ID, "status").text

    with gateway_process(home, *listen):
        # The event stream reconnects by itself; then the retry goes through and the
        # answer arrives on that stream, without a reload.
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute(
            "data-stream") == "open")
        unsent.find_element(By.CSS_SELECTOR, "button.retry").click()
        wait.until(lambda d: texts(".msg.bot") == ["before the restart", "while it is down"])
        assert browser.find_elements(By.CSS_SELECTOR, ".msg.unsent") == []
        assert texts(".msg.user") == ["before the restart", "while it is down"]
        # A reload after the restart shows the whole conversation, from the store.
        browser.refresh()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 4)
        assert texts(".msg.user") == ["before the restart", "while it is down"]
        assert texts(".msg.bot") == ["before the restart", "while it is down"]


#: How much of the message box's placeholder shows: the width its text needs (measured
#: with the box's own font) against the width inside the box, and the lines it needs
#: against the lines the box shows.
PLACEHOLDER_FIT = """
const box = document.getElementById("text"), style = getComputedStyle(box);
const context = document.createElement("canvas").getContext("2d");
context.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
const inner = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
const lineHeight = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.2;
const innerHeight = box.clientHeight - parseFloat(style.paddingTop)
  - parseFloat(style.paddingBottom);
return {placeholder: box.placeholder, needed: context.measureText(box.placeholder).width,
        inner: inner, lines: Math.floor(innerHeight / lineHeight + 0.01),
        viewport: window.innerWidth};
"""


@pytest.mark.slow
@pytest.mark.parametrize("width", [320, 1024])
def test_the_message_box_placeholder_is_shown_whole(gateway_url, browser, width):
    browser.set_window_size(width, 700)
    browser.get(gateway_url + "/")
    fit = browser.execute_script(PLACEHOLDER_FIT)
    if width == 320:
        assert fit["viewport"] <= 340, fit  # the window really is that narrow
    assert fit["placeholder"].startswith("Type a message"), fit
    # One line of text in a one-line box: all of it shows, nothing is cut off.
    assert fit["lines"] >= 1 and fit["needed"] <= fit["inner"], fit
    if width == 1024:  # where there is room, the keys are explained
        assert "Shift+Enter" in fit["placeholder"], fit


@pytest.mark.slow
def test_a_live_reply_grows_in_a_draft_then_the_answer_takes_its_place(tmp_path, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[agent]\nkind = "echo"\necho_typing_ms = 250\n'
                                      '[queue]\ndebounce_ms = 0\n')
    words = " ".join(f"word{n}" for n in range(10))
    with gateway_process(home) as gateway:
        browser.get(gateway.url + "/")
        browser.find_element(By.ID, "text").send_keys(words)
        browser.find_element(By.ID, "send").click()
        # The draft bubble is replaced as it grows: an element read as it goes is stale.
        wait = WebDriverWait(browser, 15, poll_frequency=0.05,
                             ignored_exceptions=(StaleElementReferenceException,))
        drafts: list[str] = []

        def draft_seen(driver) -> bool:
            found = driver.find_elements(By.CSS_SELECTOR, ".msg.bot.draft")
            if found and found[0].text and found[0].text not in drafts:
                drafts.append(found[0].text)
            return len(drafts) >= 2

        wait.until(draft_seen)  # the answer being written, in a draft bubble
        # The answer, not the draft grown to its full text: a bubble that is no draft.
        wait.until(lambda d: [m.text for m in d.find_elements(
            By.CSS_SELECTOR, ".msg.bot:not(.draft)")] == [words])
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.bot.draft") == [])
        assert [m.text for m in browser.find_elements(By.CSS_SELECTOR, ".msg.bot")] == [words]
    assert all(words.startswith(text) for text in drafts), drafts
    assert len(drafts[0]) < len(words)
