"""What a plugin's tests implement for the contract suite: :class:`PlatformAdapter`, the
driver of its fake platform, and :func:`fast_pacing`, the channel settings it usually gives."""

from __future__ import annotations

from typing import Any, ClassVar

#: The account every contract test configures: ``[channels.<name>.accounts.main]``.
ACCOUNT = "main"


# -- the adapter a plugin's tests implement ----------------------------------------------


def fast_pacing() -> dict[str, Any]:
    """Channel-wide settings (``[channels.<name>]``) that pace and retry far faster than
    any platform needs, so the suite's sends never wait out real-world limits: what a
    :meth:`PlatformAdapter.channel_config` usually returns (a fresh dict each call)."""
    return {"rate_limits": {"chat": "100/s", "account": "1000/s"},
            "retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0}}


class PlatformAdapter:
    """Drives one plugin's fake platform for the contract suite.

    Subclasses set :attr:`channel_plugin` and :attr:`channel_name` and
    implement :meth:`start`, :meth:`stop`, :meth:`account_config`,
    :meth:`inject` and :meth:`sent_texts`; each optional capability below is
    on by default, so a platform that lacks one says so (``supports_threads =
    False``) and the test about it is skipped; a platform that has it
    implements the method the capability names.

    Ids are strings, as the channel puts them in ``InboundMessage``: override
    :meth:`direct_chat`, :meth:`group_chat`, :meth:`user_id` and
    :meth:`thread_id` when the platform has its own id shapes (Telegram's
    private chat id is the user's id; its group ids are negative).

    Use it as an async context manager: ``async with MyAdapter() as adapter``.
    """

    #: The plugin object registering the channel (the plugin module, or a class
    #: with a ``register_channels`` hookimpl).
    channel_plugin: ClassVar[Any] = None
    #: The channel's name: the key under ``[channels.<name>]``.
    channel_name: ClassVar[str] = ""

    #: Groups with mentions: :meth:`inject` honours ``group`` and ``mention``.
    supports_groups: ClassVar[bool] = True
    #: Threads or topics: :meth:`inject` honours ``thread_id`` and
    #: :meth:`sent_texts` filters by it.
    supports_threads: ClassVar[bool] = True
    #: Media out: :meth:`sent_media` reports the files the bot sent.
    supports_media_out: ClassVar[bool] = True
    #: A typing indicator: :meth:`typing_count` counts what reached the platform.
    supports_typing: ClassVar[bool] = True
    #: The platform redelivers events: :meth:`redeliver_last` does it on demand.
    supports_redelivery: ClassVar[bool] = True
    #: Credentials can be revoked on the fake: :meth:`revoke_credentials` (off by default).
    supports_revoke: ClassVar[bool] = False
    #: The platform refuses one chat's messages for that chat's own reason:
    #: :meth:`refuse_chat` (off by default).
    supports_chat_refusal: ClassVar[bool] = False
    #: The platform can deliver the bot's own messages: :meth:`inject_own_message`.
    supports_own_messages: ClassVar[bool] = True
    #: The platform sends events that are not messages for the agent (edits, membership
    #: changes, service messages...): :meth:`inject_non_message_event` makes each kind
    #: named in :attr:`non_message_events`.
    supports_non_message_events: ClassVar[bool] = True
    #: The kinds of non-message events :meth:`inject_non_message_event` knows, in the
    #: platform's words (``edited_message``, ``my_chat_member``...).
    non_message_events: ClassVar[tuple[str, ...]] = ()

    #: A live reply can be watched (:meth:`live_timeline`), for a channel that declares
    #: ``chatkernel.channels.LiveReplies`` (one that does not is checked to refuse
    #: ``streaming = "on"``, and needs no :meth:`live_timeline`).
    supports_live_replies: ClassVar[bool] = True

    #: The channel's text limit, to build a reply that must be split; None: the
    #: channel class's ``limits.text_limit``.
    text_limit: ClassVar[int | None] = None
    #: Seconds any single wait of a contract test may take.
    timeout: ClassVar[float] = 10.0

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the fake platform (bind its HTTP server on 127.0.0.1)."""
        raise NotImplementedError("PlatformAdapter.start: start the fake platform")

    async def stop(self) -> None:
        """Stop the fake platform."""

    async def __aenter__(self) -> "PlatformAdapter":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()

    async def attach_gateway(self, url: str) -> None:
        """The gateway's HTTP server (every channel's ``http_routes``) is at ``url``.

        Called before each kernel start, before :meth:`account_config`, so a
        webhook account can name its public URL (``f"{url}/mychat/main/events"``);
        the address is bound already and serves once the kernel has started (a
        delivery made sooner waits for it). Each start has a new address: a
        webhook platform points its deliveries there, or the channel registers
        the URL from its config as it starts. Deliveries the fake could not make
        while no gateway listened must be retried or held, as the real platform
        does. The default does nothing.
        """

    # -- configuration -------------------------------------------------------------------

    def account_config(self) -> dict[str, Any]:
        """The ``[channels.<name>.accounts.main]`` table pointing at the fake
        (base URL, token...). ``allow_from`` is set by the contract."""
        raise NotImplementedError("PlatformAdapter.account_config: point the account at the fake")

    def channel_config(self) -> dict[str, Any]:
        """Extra channel-wide settings (``[channels.<name>]``: ``retry``,
        ``rate_limits``...), e.g. faster pacing than the real platform needs."""
        return {}

    # -- ids -----------------------------------------------------------------------------

    def user_id(self, n: int) -> str:
        """The sender id the channel reports for test user ``n`` (1, 2, ...)."""
        return f"user-{n}"

    def direct_chat(self, n: int) -> str:
        """The chat id of user ``n``'s direct chat with the bot."""
        return f"dm-{n}"

    def group_chat(self, n: int) -> str:
        """The chat id of group ``n`` (the bot is a member)."""
        return f"group-{n}"

    def thread_id(self, n: int) -> str:
        """The thread (topic) id of thread ``n``, as the channel reports it."""
        return f"thread-{n}"

    # -- the user's side -----------------------------------------------------------------

    async def inject(self, chat_id: str, text: str, *, sender_id: str = "user-1",
                     sender_name: str = "", group: bool = False, mention: bool = False,
                     thread_id: str | None = None) -> None:
        """A user writes ``text`` to the bot in ``chat_id``, as the platform delivers it.

        ``group``: ``chat_id`` is a group chat; ``mention``: the message
        mentions the bot (the adapter adds the platform's mention: ``@name``,
        ``<@U…>``...); ``thread_id``: in that thread or topic. Returns once the
        platform holds the update (a poll will get it, a webhook will carry it).
        """
        raise NotImplementedError("PlatformAdapter.inject: make the fake deliver a message")

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        """What the bot sent to ``chat_id``, in order, as the user reads it.

        Markup rendered to text (HTML tags stripped, entities unescaped); media
        captions are not texts. With ``thread_id``, only the messages sent in
        that thread; without, every message in the chat.
        """
        raise NotImplementedError("PlatformAdapter.sent_texts: read what the bot sent")

    def sent_media(self, chat_id: str) -> list[tuple[str, str | None]]:
        """``(kind, filename)`` of every file the bot sent to ``chat_id``, in order.

        ``kind`` in the channel's vocabulary (its ``limits.media_kinds`` values:
        ``photo``, ``document``...); ``filename`` as the platform keeps it, or
        None where the platform does not keep names (Telegram photos).
        """
        raise NotImplementedError("implement PlatformAdapter.sent_media, or set "
                                  "supports_media_out = False")

    def typing_count(self, chat_id: str) -> int:
        """How many typing indications reached the platform for ``chat_id``."""
        raise NotImplementedError("implement PlatformAdapter.typing_count, or set "
                                  "supports_typing = False")

    async def redeliver_last(self) -> None:
        """Make the platform deliver the last injected event again, with the same
        platform ids (a Slack retry, a WhatsApp repeat, an unconfirmed update)."""
        raise NotImplementedError("implement PlatformAdapter.redeliver_last, or set "
                                  "supports_redelivery = False")

    async def revoke_credentials(self) -> None:
        """Make the fake refuse the account's credentials from now on."""
        raise NotImplementedError("implement PlatformAdapter.revoke_credentials, or leave "
                                  "supports_revoke = False")

    async def refuse_chat(self, chat_id: str) -> None:
        """From now on the platform refuses the bot's messages to ``chat_id`` for a
        reason of that chat alone (it is gone, the bot is not in it, the user's quota
        is spent), the way the platform says so: in the answer to the send, or in a
        later ``failed`` delivery status."""
        raise NotImplementedError("implement PlatformAdapter.refuse_chat, or leave "
                                  "supports_chat_refusal = False")

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        """The platform delivers a message the bot itself sent to ``chat_id`` (an echo
        of its own send, as Slack's events and WeChat's polls carry), as it would."""
        raise NotImplementedError("implement PlatformAdapter.inject_own_message, or set "
                                  "supports_own_messages = False")

    def live_timeline(self, chat_id: str) -> list[tuple[str, str]]:
        """What the user saw of the bot's replies in ``chat_id``, in order:
        ``("preview", text)`` for each state a live reply's preview showed (a draft, the
        preview message as sent or edited, a stream's text so far) and ``("final",
        text)`` for each message of a finished answer as it was delivered (sent, or
        the preview edited to it). Texts as :meth:`sent_texts` renders them."""
        raise NotImplementedError("implement PlatformAdapter.live_timeline, or set "
                                  "supports_live_replies = False")

    async def inject_non_message_event(self, kind: str, chat_id: str, *, sender_id: str,
                                       text: str) -> None:
        """The platform delivers an event of ``kind`` (one of
        :attr:`non_message_events`) in ``chat_id``, caused by ``sender_id``, that is
        not a message for the agent. Where the event carries text (an edit's new text)
        it is ``text``, so a test can see whether it reached the agent."""
        raise NotImplementedError("implement PlatformAdapter.inject_non_message_event, or "
                                  "set supports_non_message_events = False")
