"""Built-in ``inbound_accept``: the account's allowlist and the group mention rule."""

from chatkernel.sdk.models import Verdict
from chatkernel.hookspecs import hookimpl


def sender_allowed(allow_from, message) -> bool:
    """``"*"`` admits anyone; otherwise the sender id (or the chat id) must be listed."""
    allowed = set(allow_from or ())
    return "*" in allowed or message.sender_id in allowed or (
        message.is_group and f"chat:{message.chat_id}" in allowed)


@hookimpl(trylast=True)
def inbound_accept(message, account):
    config = account.config
    if not sender_allowed(getattr(config, "allow_from", ()), message):
        return Verdict.deny(
            "sender not on the allowlist",
            reply=(f"You are not allowed to use this bot. Your id is {message.sender_id}; "
                   f"the owner can add it to channels.{account.channel_name}.accounts."
                   f"{account.name}.allow_from."),
        )
    if message.is_group and getattr(config, "require_mention", True) and not (
        message.mentions_bot or message.reply_to_bot
    ):
        return Verdict.deny("group message without a mention of the bot")
    return Verdict.allow()
