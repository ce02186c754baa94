"""The public plugin API: everything a channel plugin imports from the kernel.

A channel plugin imports from here (and ``hookimpl`` from here or from
``chatkernel``), never from ``chatkernel.core``, which is the kernel's
internals and changes without notice — as pytest keeps ``_pytest`` behind
``pytest``. What this module exports is kept compatible::

    from chatkernel.channels import (
        Channel, ChannelLimits, RateLimit, AccountConfig, HttpClient, PlatformError,
        InboundMessage, OutboundPayload, Route, SendResult, ProbeResult, Polled, hookimpl,
    )

docs/writing-a-channel.md walks through a channel end to end; docs/api.md lists
every name, and what is stable (a test keeps it and ``__all__`` the same).

The pieces, by concern:

- the channel: :class:`Channel` (the platform contract), :class:`ChannelLimits`,
  :class:`RateLimit`, :class:`Capabilities`, :class:`AccountConfig` (the base of
  an account's config model; :class:`Deprecated` its keys on their way out),
  :class:`ChannelContext` (what the kernel gives an account; its ``clock`` is a
  :class:`ChannelClock`), :class:`LiveReplies` (the
  capability of showing a reply while it is written, with :class:`Preview` and
  :data:`LiveMode`), :class:`ReadReceipts` (marking messages read apart from the typing
  indicator), :class:`ConfigError`;
- the values that flow through it: :class:`InboundMessage`, :class:`MediaRef`,
  :class:`Route`, :class:`OutboundPayload`, :class:`SendResult`,
  :class:`SendError`, :class:`ProbeResult`, :class:`Account`, :class:`Verdict` (what
  :meth:`Channel.screen_inbound` may return);
- receiving: the transports :class:`Polling`, :class:`Webhook`, :class:`Socket`
  (and their base :class:`Transport`), :class:`Deliver` / :class:`BatchDeliver`
  (what ``Transport.run`` gets), :class:`Polled`, :class:`Trouble`,
  :func:`refusal`, :func:`deliver_many`, :func:`normalize_batch`, :func:`per_chat`;
  webhooks: :class:`Verifier`, :class:`SecretHeader`, :class:`HmacSignature`
  (Slack's and Meta's schemes live in their plugins), :class:`WebhookRejected`;
  sockets: :class:`SocketLink`; websocket gateways: :class:`Heartbeat` (beats, their
  acknowledgements and :class:`MissedHeartbeat`), :class:`JitteredBackoff`;
- the platform's HTTP API: :class:`HttpClient`, :class:`Answer`,
  :class:`PlatformError`, :func:`transport_error`, :func:`parse_retry_after`, and the
  rate-limit buckets a platform announces in its headers, :class:`RouteBuckets` (each
  request's :class:`BucketSlot`);
- formatting: :class:`MarkdownRenderer` (subclass it for the platform's
  markup), :func:`render`, :func:`render_payload`, :func:`escape_html`, :func:`escape_attr`, :func:`display_url`,
  :func:`wrap_marks`;
- logins behind ``chatkernel login <channel>`` (the ``register_logins`` hook):
  :class:`Login`, :class:`LoginRequest`, :class:`LoginResult`, :class:`LoginFailed`,
  :class:`LoginStep`;
- JSON with the kernel's codec: :func:`encode_json`, :func:`decode_json`.

Importing this module loads aiohttp and pydantic: import it inside hook bodies
(or the channel's own module), not at the top of the plugin's ``__init__``.
"""

from chatkernel.sdk.channel import (
    BatchDeliver,
    Capabilities,
    Channel,
    ChannelLimits,
    Deliver,
    Polled,
    RateLimit,
    ReadReceipts,
    Trouble,
    deliver_many,
    normalize_batch,
    per_chat,
)
from chatkernel.sdk.accounts import AccountConfig, Deprecated
from chatkernel.sdk.receiving.buckets import BucketSlot, RouteBuckets
from chatkernel.sdk.live import LiveMode, LiveReplies, Preview
from chatkernel.sdk.errors import ConfigError
from chatkernel.sdk.http_client import (
    Answer,
    HttpClient,
    PlatformError,
    parse_retry_after,
    transport_error,
)
from chatkernel.sdk.markup import (
    Line,
    MarkdownRenderer,
    display_url,
    escape_attr,
    escape_html,
    render,
    render_payload,
    wrap_marks,
)
from chatkernel.sdk.models import (
    Account,
    InboundMessage,
    MediaRef,
    OutboundPayload,
    ProbeResult,
    Route,
    SendError,
    SendResult,
    Verdict,
)
from chatkernel.sdk.clock import ChannelClock
from chatkernel.sdk.context import ChannelContext
from chatkernel.sdk.receiving import refusal
from chatkernel.sdk.receiving.gateway import Heartbeat, JitteredBackoff, MissedHeartbeat
from chatkernel.sdk.receiving.sockets import Socket, SocketLink
from chatkernel.sdk.receiving.transport import POLL_MARGIN_SECONDS, Polling, Transport
from chatkernel.sdk.codec import decode_json, encode_json
from chatkernel.sdk.receiving.webhooks import (
    HmacSignature,
    SecretHeader,
    Verifier,
    Webhook,
    WebhookRejected,
)
from chatkernel.hookspecs import hookimpl
from chatkernel.sdk.login import Login, LoginFailed, LoginRequest, LoginResult, LoginStep

__all__ = [
    "Account",
    "AccountConfig",
    "Answer",
    "BatchDeliver",
    "BucketSlot",
    "Capabilities",
    "Channel",
    "ChannelClock",
    "ChannelContext",
    "ChannelLimits",
    "ConfigError",
    "Deliver",
    "Deprecated",
    "Heartbeat",
    "HmacSignature",
    "HttpClient",
    "InboundMessage",
    "JitteredBackoff",
    "Line",
    "LiveMode",
    "LiveReplies",
    "Login",
    "LoginFailed",
    "LoginRequest",
    "LoginResult",
    "LoginStep",
    "MarkdownRenderer",
    "MediaRef",
    "MissedHeartbeat",
    "OutboundPayload",
    "PlatformError",
    "Polled",
    "POLL_MARGIN_SECONDS",
    "Polling",
    "Preview",
    "ProbeResult",
    "RateLimit",
    "ReadReceipts",
    "Route",
    "RouteBuckets",
    "SecretHeader",
    "SendError",
    "SendResult",
    "Socket",
    "SocketLink",
    "Transport",
    "Trouble",
    "Verdict",
    "Verifier",
    "Webhook",
    "WebhookRejected",
    "decode_json",
    "deliver_many",
    "display_url",
    "encode_json",
    "escape_attr",
    "escape_html",
    "hookimpl",
    "normalize_batch",
    "parse_retry_after",
    "per_chat",
    "refusal",
    "render",
    "render_payload",
    "transport_error",
    "wrap_marks",
]
