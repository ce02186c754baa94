"""The channel contract before transports and the context: kept working, with warnings.

A channel written against the earlier contract — receive methods on the channel
(``run``, ``poll``, ``webhook_verifier``...), platform features as class
attributes (``busy_hint``, ``delivery_statuses``...), the kernel's services as
channel methods (``self.save_cursor``, ``self.report_problem``...) — runs as
before. Each old name warns once per place with a :class:`DeprecationWarning`
naming its replacement (docs/writing-a-channel.md, "Upgrading a channel").
Nothing here is used by a channel written for the current contract.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from chatkernel.sdk.channel import Channel
    from chatkernel.sdk.sockets import SocketLink
    from chatkernel.sdk.transport import Transport

#: Class attributes that became fields of ``Capabilities``.
CAPABILITY_NAMES = frozenset({"command_prefixes", "busy_hint", "delivery_statuses",
                              "idempotent_sends", "recipient_error_codes"})
#: Class attributes that became fields of ``ChannelLimits``.
LIMIT_NAMES = frozenset({"indicator_interval"})
#: Class attributes that became attributes of the transport.
TRANSPORT_ATTRIBUTES = {
    "quiet_by_nature": "Transport.quiet",
    "receive_backoff": "Transport.backoff",
    "webhook_max_bytes": "Webhook.max_bytes",
    "webhook_content_types": "Webhook.content_types",
}
#: Receive-side methods a channel used to implement, and where they went.
RECEIVE_METHODS = {
    "run": "Transport.run",
    "poll": "Polling.poll",
    "start_polling": "Polling.prepare",
    "webhook_verifier": "Webhook.verifier",
    "register_webhook": "Webhook.register",
    "webhook_answer": "Webhook.answer",
    "webhook_events": "Webhook.events",
    "webhook_ok": "Webhook.ok",
    "http_routes": "Transport.http_routes",
    "serve_elsewhere": "Transport.serve_elsewhere",
    "event_chat": "Transport.event_chat",
    "event_has_media": "Transport.event_has_media",
    "describe_event": "Transport.describe_event",
    "event_id": "Transport.event_id",
    "is_quiet": "Transport.quiet",
}
#: Channel members that moved to the context.
CONTEXT_MEMBERS = frozenset({
    "store", "settings", "shares_store", "report_alive", "report_problem", "clear_problem",
    "pause", "report_delivery_status", "record_credentials", "load_cursor", "save_cursor",
    "save_media", "max_inbound_bytes"})


def _warn(message: str, stacklevel: int = 3) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def _own(cls: type, name: str) -> bool:
    """Whether ``cls`` or a subclass of Channel between it and Channel defines ``name``."""
    from chatkernel.sdk.channel import Channel

    return any(name in klass.__dict__ for klass in cls.__mro__
               if klass is not Channel and issubclass(klass, Channel))


def adapt_subclass(cls: type["Channel"]) -> None:
    """Translate the old class attributes of a new Channel subclass (warning once)."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    found = {name: cls.__dict__[name] for name in CAPABILITY_NAMES if name in cls.__dict__}
    if found:
        _warn(f"{where}: {', '.join(sorted(found))} are deprecated as class attributes: declare "
              f"capabilities = Capabilities({', '.join(f'{n}=...' for n in sorted(found))})",
              stacklevel=4)
        cls.capabilities = dataclasses.replace(cls.capabilities, **found)
    if "indicator_interval" in cls.__dict__:
        _warn(f"{where}.indicator_interval is deprecated: set "
              "ChannelLimits(indicator_interval=...)", stacklevel=4)
        cls.limits = dataclasses.replace(cls.limits,
                                         indicator_interval=cls.__dict__["indicator_interval"])
    for name, replacement in TRANSPORT_ATTRIBUTES.items():
        if name in cls.__dict__:
            _warn(f"{where}.{name} is deprecated: set {replacement} on the channel's "
                  "transport", stacklevel=4)
    if "account_identity" in cls.__dict__:
        _warn(f"{where}.account_identity is deprecated: declare identity = (...) on the "
              "account model (AccountConfig.identity)", stacklevel=4)
    if "refused_advice" in cls.__dict__:
        _warn(f"{where}.refused_advice is deprecated: return Trouble(..., advice=...) from "
              "receive_trouble", stacklevel=4)
    old = sorted(name for name in RECEIVE_METHODS if name in cls.__dict__)
    if old and not _own(cls, "transport"):
        _warn(f"{where}: {', '.join(old)} on the channel are deprecated: return a transport "
              "from transport() (" + ", ".join(RECEIVE_METHODS[n] for n in old) + ")",
              stacklevel=4)


def _receives_the_old_way(channel: "Channel") -> bool:
    cls = type(channel)
    return not _own(cls, "transport") and any(_own(cls, name) for name in RECEIVE_METHODS)


def transport_of(channel: "Channel") -> "Transport | None":
    """The adapter transport of a channel that receives through its own old methods
    (the same object on every call: its webhook requests reach its loop)."""
    if not _receives_the_old_way(channel):
        return None
    made = channel.__dict__.get("_legacy_transport")
    if made is None:
        made = LegacyTransport(channel)
        object.__setattr__(channel, "_legacy_transport", made)
    return made


def set_capability(channel: "Channel", name: str, value: Any) -> None:
    _warn(f"setting {type(channel).__name__}.{name} is deprecated: set "
          f"self.capabilities = dataclasses.replace(self.capabilities, {name}=...)")
    object.__setattr__(channel, "capabilities",
                       dataclasses.replace(channel.capabilities, **{name: value}))


def moved_member(channel: "Channel", name: str) -> Any:
    """An old Channel member, from where it lives now; AttributeError for any other."""
    if name.startswith("_"):
        raise AttributeError(name)
    cls = type(channel).__name__
    if name in CONTEXT_MEMBERS:
        _warn(f"{cls}.{name} is deprecated: use self.context.{name}")
        return getattr(channel.__dict__["context"], name)
    if name in CAPABILITY_NAMES:
        _warn(f"{cls}.{name} is deprecated: use self.capabilities.{name}")
        return getattr(channel.capabilities, name)
    if name in LIMIT_NAMES:
        _warn(f"{cls}.{name} is deprecated: use self.limits.{name}")
        return getattr(channel.limits, name)
    if name == "config_key":
        _warn(f"{cls}.config_key is deprecated: use self.account.config_key")
        return channel.account.config_key
    if name == "render_text":
        from chatkernel.sdk.markup import render_payload

        _warn(f"{cls}.render_text(payload) is deprecated: use "
              "chatkernel.channels.render_payload(payload, self.markup)")
        return lambda payload: render_payload(payload, channel.markup)
    if name == "refusal":
        from chatkernel.sdk.receiving import refusal

        _warn(f"{cls}.refusal(error) is deprecated: use chatkernel.channels.refusal(self, error)")
        return functools.partial(refusal, channel)
    if name in _TRANSPORT_CALLS or name in RECEIVE_METHODS or name == "webhook_path":
        _warn(f"{cls}.{name} is deprecated: the channel's transport() has it")
        transport = channel.transport()
        if name == "is_quiet":
            return lambda: transport.quiet
        if name == "webhook_path":
            return transport.path
        return getattr(transport, _TRANSPORT_CALLS.get(name, name))
    raise AttributeError(f"{cls!r} object has no attribute {name!r}")


#: Old Channel helpers a channel's own ``run`` called, by their adapter method.
_TRANSPORT_CALLS = {
    "poll_forever": "poll_forever",
    "serve_webhook": "serve_webhook",
    "supervise_socket": "supervise_socket",
    "deliver_events": "receive",
    "http_routes": "http_routes",
    "serve_elsewhere": "serve_elsewhere",
}


def _legacy_transport_class() -> type:
    from chatkernel.sdk.sockets import Socket
    from chatkernel.sdk.transport import Polling
    from chatkernel.sdk.webhooks import Webhook

    class LegacyTransport(Webhook, Polling, Socket):
        """A channel's old receive methods, as a transport."""

        def __init__(self, channel: "Channel") -> None:
            super().__init__(channel)
            self._session: Callable[["SocketLink"], Awaitable[None]] | None = None

        def _old(self, name: str) -> Any:
            """The channel's own old method ``name``, or None."""
            return getattr(self.channel, name) if _own(type(self.channel), name) else None

        @property
        def quiet(self) -> bool:  # type: ignore[override]
            is_quiet = self._old("is_quiet")
            if is_quiet is not None:
                return bool(is_quiet())
            return bool(type(self.channel).__dict__.get("quiet_by_nature", False)
                        or getattr(type(self.channel), "quiet_by_nature", False)) \
                or self._verifier() is not None

        @property
        def backoff(self) -> tuple[float, float]:  # type: ignore[override]
            return getattr(type(self.channel), "receive_backoff", (1.0, 30.0))

        @property
        def max_bytes(self) -> int:  # type: ignore[override]
            return getattr(type(self.channel), "webhook_max_bytes", 1024 * 1024)

        @property
        def content_types(self) -> tuple[str, ...]:  # type: ignore[override]
            return getattr(type(self.channel), "webhook_content_types", ("application/json",))

        def _verifier(self) -> Any:
            verifier = self._old("webhook_verifier")
            return verifier() if verifier is not None else None

        # the channel's loop, and the kit's loops it called
        async def run(self, deliver: Any) -> None:
            run = self._old("run")
            if run is None:
                raise NotImplementedError(f"channel {self.channel.name!r} has no receive loop")
            await run(deliver)

        async def poll_forever(self, deliver: Any) -> None:
            await Polling.run(self, deliver)

        async def serve_webhook(self, deliver: Any) -> None:
            await Webhook.run(self, deliver)

        async def supervise_socket(self, deliver: Any,
                                   session: Callable[["SocketLink"], Awaitable[None]], *,
                                   silent_after: float = 120.0) -> None:
            self._session, self.silent_after = session, silent_after
            await Socket.run(self, deliver)

        async def session(self, link: "SocketLink") -> None:
            assert self._session is not None
            await self._session(link)

        # polling
        async def poll(self, cursor: str | None) -> Any:
            return await self.channel.poll(cursor)

        async def prepare(self) -> None:
            start = self._old("start_polling")
            if start is not None:
                await start()

        # webhooks
        def verifier(self) -> Any:
            return self._verifier()

        async def register(self) -> None:
            register = self._old("register_webhook")
            if register is not None:
                await register()

        def answer(self, payload: Any) -> Any:
            answer = self._old("webhook_answer")
            return answer(payload) if answer is not None else None

        def events(self, payload: Any) -> list[Any]:
            events = self._old("webhook_events")
            return events(payload) if events is not None else [payload]

        def ok(self) -> Any:
            ok = self._old("webhook_ok")
            return ok() if ok is not None else Webhook.ok(self)

        def http_routes(self) -> list[tuple[str, str, Any]]:
            routes = self._old("http_routes")
            if routes is not None:
                return routes()
            return Webhook.http_routes(self) if self._verifier() is not None else []

        async def serve_elsewhere(self, deliver: Any) -> None:
            elsewhere = self._old("serve_elsewhere")
            if elsewhere is not None:
                await elsewhere(deliver)
            elif self._verifier() is not None:
                await Webhook.serve_elsewhere(self, deliver)
            else:
                await anyio.sleep_forever()

        # events
        def event_chat(self, event: Any) -> Any:
            method = self._old("event_chat")
            return method(event) if method is not None else None

        def event_has_media(self, event: Any) -> bool:
            method = self._old("event_has_media")
            return method(event) if method is not None else False

        def describe_event(self, event: Any) -> str:
            method = self._old("describe_event")
            return method(event) if method is not None else Webhook.describe_event(self, event)

        def event_id(self, event: Any) -> str | None:
            method = self._old("event_id")
            return method(event) if method is not None else None

    return LegacyTransport


def LegacyTransport(channel: "Channel") -> "Transport":  # noqa: N802 - a class, made late
    global _LEGACY_CLASS
    if _LEGACY_CLASS is None:
        _LEGACY_CLASS = _legacy_transport_class()
    return _LEGACY_CLASS(channel)


_LEGACY_CLASS: type | None = None
