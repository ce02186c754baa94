"""A Slack code fence with code on its opening line: Slack's mrkdwn has no language, so
what a person types after ``` is code, and an echo of it must keep that line."""

from __future__ import annotations

import pytest

from chatkernel.testing import open_contract_run
from chatkernel_slack.markup import to_slack_mrkdwn
from slack_adapters import SlackSocketAdapter

pytestmark = pytest.mark.anyio

DM, USER = "D0DIRECT01", "U0USER0001"


@pytest.mark.parametrize(("markdown", "mrkdwn"), [
    # Code on the opening line: kept as the block's first line.
    ("```def f():\n    return 1\n```", "```\ndef f():\n    return 1\n```"),
    ("```x = 1 < 2\n```", "```\nx = 1 &lt; 2\n```"),
    ("```f(x) -> y\n```", "```\nf(x) -&gt; y\n```"),
    # One word of letters, digits and _ + - . # alone: a language tag, which mrkdwn
    # cannot show, so it is left out.
    ("```python\nprint(1)\n```", "```\nprint(1)\n```"),
    ("```c++\nint x;\n```", "```\nint x;\n```"),
    ("```objective-c\n[x y];\n```", "```\n[x y];\n```"),
    ("```\nplain\n```", "```\nplain\n```"),
])
def test_text_after_the_opening_fence_is_code_unless_it_is_a_language_tag(markdown, mrkdwn):
    assert to_slack_mrkdwn(markdown) == mrkdwn


async def test_an_echoed_fence_keeps_its_first_line(tmp_path):
    text = "```def f(): # cf01z\n    return 1\n```"
    async with SlackSocketAdapter() as adapter:
        async with open_contract_run(adapter, tmp_path / "kernel") as run:
            run.replies["cf01z"] = text  # the agent answers with what it was sent
            await adapter.inject(DM, text, sender_id=USER)
            await run.wait_for_tokens(DM, ["cf01z"])
            assert run.agent_texts() == [text]
            [sent] = adapter.slack.sent(DM)
            assert sent.text == "```\ndef f(): # cf01z\n    return 1\n```"
