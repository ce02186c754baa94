"""The dev server and ``chatkernel run`` as two real processes: the channel, offline."""

from __future__ import annotations

from chatkernel.testing import gateway_home, gateway_process, post_json, wait_for_messages
from chatkernel.testing.process import devserver

MODULE = "chatkernel_discord.devserver"


def test_the_gateway_answers_a_user_of_the_dev_server(tmp_path):
    with devserver(MODULE) as fake:
        base = fake["base_url"]
        home = gateway_home(
            tmp_path / "home", "[channels.discord.accounts.main]\n"
            f'token = "{fake["token"]}"\nbase_url = "{base}"\nallow_from = ["*"]\n'
            "")
        with gateway_process(home) as gateway:
            status, answer = post_json(f"{base}/_fake/messages",
                                       {"chat_id": "dm-1", "text": "hello"})
            assert status == 200 and answer["event_id"] >= 1
            messages = wait_for_messages(f"{base}/_fake/sent?chat_id=dm-1&wait=10", 1, 20)
        assert [m["text"] for m in messages] == ["hello"]


def test_the_dev_server_names_what_is_wrong_with_a_message():
    with devserver(MODULE) as fake:
        status, answer = post_json(f"{fake['base_url']}/_fake/messages", {"chat_id": "dm-1"})
        assert (status, answer) == (400, {"error": "text is required (fields: chat_id, text, "
                                                   "sender_id, sender_name, is_group, "
                                                   "mentions_bot, thread_id)"})
