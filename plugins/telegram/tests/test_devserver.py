"""The dev server and ``chatkernel run`` as two real processes: a Telegram bot, offline."""

from __future__ import annotations


from chatkernel.testing.process import devserver as run_devserver
from chatkernel.testing.process import gateway_process, wait_for_messages
from chatkernel.testing.process import post_json as post


def devserver():
    return run_devserver("chatkernel_telegram.devserver")


def sent(base_url, chat_id, want, timeout=15.0):
    return wait_for_messages(f"{base_url}/_fake/sent?chat_id={chat_id}", want, timeout)


def test_chatkernel_run_answers_a_user_of_the_dev_server(tmp_path):
    with devserver() as fake:
        base = fake["base_url"]
        assert post(f"{base}/_fake/messages", {"chat_id": "x"})[0] == 400
        assert post(f"{base}/_fake/messages", {"chat_id": 7, "colour": "red"})[0] == 400
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.toml").write_text(
            '[queue]\nmode = "followup"\ndebounce_ms = 0\n\n'  # one echo per message
            "[channels.telegram.accounts.main]\n"
            f'bot_token = "{fake["token"]}"\napi_base = "{base}"\nallow_from = ["*"]\n'
            "poll_timeout = 1\n")
        with gateway_process(home):
            status, answer = post(f"{base}/_fake/messages", {"chat_id": 42, "text": "hello"})
            assert status == 200 and answer["update_id"] >= 1
            post(f"{base}/_fake/messages", {"chat_id": -100, "chat_type": "supergroup",
                                            "chat_title": "team", "text": "chatter"})
            post(f"{base}/_fake/messages", {"chat_id": 42, "text": "again"})
            messages = sent(base, 42, 2)
            assert [m["text"] for m in messages] == ["hello", "again"]
            assert all(m["method"] == "sendMessage" for m in messages)
        # In a group the bot answers only when mentioned (require_mention, the default).
        assert sent(base, -100, 1, timeout=0.5) == []
