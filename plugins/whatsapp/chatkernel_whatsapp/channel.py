"""The WhatsApp channel: the WhatsApp Business Cloud API, receiving on a webhook.

Only WhatsApp lives here: reading the messages and statuses of Meta's webhook
notifications, the Graph API calls, the media-kind and MIME tables, what its error
codes mean (131047 the closed 24-hour window, 190 an expired token, the rate limits),
the statuses that tell a sent message's fate, the probe. Its transport, the webhook
that splits a notification into its messages and statuses (every entry and change of
it), is chatkernel_whatsapp.receiving; the webhook route, its signature check,
journal-before-200, dedupe, pacing, retries and the outbox are the kernel's.
"""
from __future__ import annotations

import logging
import mimetypes
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from chatkernel import Session
from chatkernel.channels import (
    AccountConfig,
    Capabilities,
    Channel,
    ChannelContext,
    ChannelLimits,
    InboundMessage,
    MediaRef,
    OutboundPayload,
    PlatformError,
    ProbeResult,
    RateLimit,
    ReadReceipts,
    Route,
    SendError,
    SendResult,
    Trouble,
    Verdict,
    render_payload,
)
from chatkernel_whatsapp.api import (
    DEFAULT_API_BASE,
    DEFAULT_API_VERSION,
    OUTSIDE_WINDOW,
    RECIPIENT_CODES,
    TOKEN_EXPIRED,
    TOKEN_PATTERN,
    UNSUPPORTED_MEDIA,
    GraphAPI,
    GraphError,
    media_mime,
)
from chatkernel_whatsapp.markup import WhatsAppText
from chatkernel_whatsapp.receiving import (
    INBOUND_MEDIA,
    Notification,
    WhatsAppWebhook,
    previous_user_id,
)
from chatkernel_whatsapp.users import Sender, Users, is_user_id, sender_of

log = logging.getLogger("chatkernel.whatsapp")

MB = 1024 * 1024
#: Outbound kinds that take a caption (audio and stickers do not).
CAPTIONED = frozenset({"image", "video", "document"})
#: How many chats' latest inbound message ids are kept for read receipts and typing.
LAST_INBOUND_CHATS = 10_000
#: System messages that say a user's ids changed (they changed their phone number, or
#: only their BSUID changed): the new ids continue the chat of the old.
ID_CHANGES = frozenset({"user_changed_number", "user_changed_user_id"})
#: What a refused access token is (followed by what to do: WhatsAppChannel.receive_trouble).
TOKEN_REFUSED = "the Graph API refused the access token (error 190: expired, revoked or invalid)"
WINDOW_CLOSED = ("the user last wrote more than 24 hours ago, and outside that "
                 "customer-service window WhatsApp delivers only approved template "
                 "messages (error 131047)")


class TemplateConfig(BaseModel):
    """``[channels.whatsapp.accounts.<name>.template]``: an approved message template
    sent instead of a text the 24-hour window refuses (heartbeats, ``chatkernel send``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    language: str = Field("en_US", min_length=2)
    #: The template's body parameters, in order; ``{text}`` is the message's text.
    parameters: list[str] = Field(default_factory=lambda: ["{text}"])


class WhatsAppAccount(AccountConfig):
    """``[channels.whatsapp.accounts.<name>]``: one business phone number."""

    identity: ClassVar[tuple[str, ...]] = ("api_base", "phone_number_id")

    access_token: str = Field(min_length=1)
    phone_number_id: str = Field(pattern=r"^[0-9]+$")
    #: The Meta app's secret: every webhook POST is signed with it.
    app_secret: str = Field(min_length=1)
    #: What Meta echoes in the webhook's GET verification (``hub.verify_token``).
    verify_token: str = Field(min_length=1)
    api_base: str = DEFAULT_API_BASE
    api_version: str = Field(DEFAULT_API_VERSION, pattern=r"^v[0-9]+\.[0-9]+$")
    #: Messages older than this when they arrive (Meta redelivers for up to 7 days
    #: after an outage) are recorded but not answered.
    max_message_age_minutes: float = Field(240, gt=0)
    template: TemplateConfig | None = None

    def webhook_secrets(self) -> tuple[str, ...]:
        return ("app_secret",)  # every notification is a webhook POST


# Every running account by its phone number id: one Meta app posts every number's
# notifications to the same callback URL, whichever account's route that is.
_accounts: "weakref.WeakValueDictionary[str, WhatsAppChannel]" = weakref.WeakValueDictionary()


def stale_reason(message: InboundMessage, account: Any, now: float | None = None) -> str | None:
    """Why a message is too old to answer (None: it is not)."""
    limit = getattr(account.config, "max_message_age_minutes", None)
    if limit is None:
        return None
    age = (time.time() if now is None else now) - message.timestamp
    if age <= limit * 60:
        return None
    return (f"stale: sent {_duration(age)} ago, over max_message_age_minutes "
            f"({limit:g}); recorded, not answered")


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.0f} minutes"


def _text_note(message: dict[str, Any]) -> str | None:
    """The text of a message that is not a file: a text, a tapped button or list
    row, a location or contacts as a note. None: nothing the agent should read."""
    kind = message.get("type")
    if kind == "text":
        return str((message.get("text") or {}).get("body") or "")
    if kind == "button":
        return str((message.get("button") or {}).get("text") or "")
    if kind == "interactive":
        reply = message.get("interactive") or {}
        chosen = reply.get(reply.get("type") or "") or {}
        return str(chosen.get("title") or "")
    if kind == "location":
        place = message.get("location") or {}
        words = ", ".join(str(place[k]) for k in ("name", "address") if place.get(k))
        where = f"{place.get('latitude')}, {place.get('longitude')}"
        note = f"[location: {words} ({where})" if words else f"[location: {where}"
        return note + (f" {place['url']}]" if place.get("url") else "]")
    if kind == "contacts":
        notes = []
        for contact in message.get("contacts") or []:
            name = (contact.get("name") or {}).get("formatted_name") or "(no name)"
            phones = ", ".join(p.get("phone") or p.get("wa_id") or ""
                               for p in contact.get("phones") or [])
            notes.append(f"[contact: {name}" + (f", {phones}]" if phones else "]"))
        return "\n".join(notes)
    return None


def _address(who: Sender) -> dict[str, str]:
    """What a reply to this sender is addressed by (the route's extra): the ids the
    message carried."""
    if who.phone and who.user_id:
        return {"phone": who.phone, "user_id": who.user_id}
    return {"phone": who.phone} if who.phone else {"user_id": who.user_id}


def _recipient(route: Route) -> tuple[str, str]:
    """Whom a send goes to: ``("to", phone)`` when the phone is known (Meta: it wins
    over ``recipient``), else ``("recipient", BSUID)``."""
    extra = route.extra
    phone = extra.get("phone")
    if phone:
        return "to", phone
    user_id = extra.get("user_id")
    if user_id:
        return "recipient", user_id
    chat = route.chat_id
    return ("recipient", chat) if is_user_id(chat) else ("to", chat)


def _explained(exc: GraphError, text: str) -> SendError:
    """``exc`` as a send error, in words a person acts on, classified as it was."""
    return PlatformError(text, kind=exc.kind, status=exc.status, code=exc.code,
                         retry_after=exc.retry_after).send_error()


class WhatsAppChannel(Channel, ReadReceipts):
    """One WhatsApp Business phone number."""

    name = "whatsapp"
    config_example = """\
[channels.whatsapp.accounts.main]
access_token = "${WHATSAPP_TOKEN}"            # the Cloud API's access token
phone_number_id = "106540352242922"           # the business number's id (the Meta app's)
app_secret = "${WHATSAPP_APP_SECRET}"         # signs every webhook POST
verify_token = "${WHATSAPP_VERIFY_TOKEN}"     # what you typed in the webhook's settings
allow_from = ["15551234567"]                  # phone numbers (digits) or user ids; "*" anyone
dm_policy = "pairing"                         # others get a code you approve (docs/access.md)
"""
    account_model = WhatsAppAccount
    limits = ChannelLimits(
        text_limit=4096, text_unit="chars", caption_limit=1024,
        # Meta's media types: jpeg/png images (webp only as stickers: sent as a
        # document), mp4/3gpp video, ogg/opus, mpeg, aac, amr and mp4 audio.
        media_kinds={".jpg": "image", ".jpeg": "image", ".png": "image",
                     ".mp4": "video", ".3gp": "video",
                     ".ogg": "audio", ".oga": "audio", ".opus": "audio", ".mp3": "audio",
                     ".m4a": "audio", ".aac": "audio", ".amr": "audio"},
        default_media_kind="document",
        media_max_bytes={"image": 5 * MB, "video": 16 * MB, "audio": 16 * MB,
                         "document": 100 * MB},
        # 80 messages/s per number; to one user about one every 6 s on average (the
        # pair rate, 131056), a reply's few parts together.
        rates={"account": RateLimit(80, 1.0), "chat": RateLimit(10, 60.0)},
        retry_base_delay=0.5,
        # The typing indicator lasts 25 s (or until the reply): refreshed before that.
        indicator_interval=20.0,
        # A turn that replies within half a second shows no typing (the reply would end
        # it at once); its messages are marked read (mark_read) two seconds after the
        # reply (which showed they were seen), one Graph API request for all of a chat's
        # quick turns within them.
        indicator_delay=0.5,
        read_mark_delay=2.0,
    )
    capabilities = Capabilities(delivery_statuses=True, recipient_error_codes=RECIPIENT_CODES)
    markup = WhatsAppText
    secret_patterns = (TOKEN_PATTERN,)

    def __init__(self, account: Any, context: ChannelContext | None = None) -> None:
        super().__init__(account, context)
        config = self.config
        self.api = GraphAPI(config.access_token, config.phone_number_id, config.api_base,
                            config.api_version)
        for secret in (config.app_secret, config.verify_token):
            self.api.http.add_secret(secret)
        #: ``GET /{phone-number-id}`` once identified: display number, verified name.
        self.phone: dict[str, Any] | None = None
        # chat -> its latest inbound message id (the read receipt and typing need one).
        self._last_inbound: OrderedDict[str, str] = OrderedDict()
        # chat -> the latest message id marked read (dropped with its _last_inbound entry)
        self._read: dict[str, str] = {}
        # (path, size, mtime) -> media id: a retried send does not upload again.
        self._uploaded: dict[tuple[str, int, float], str] = {}
        #: Each user id's chat (phones and BSUIDs), kept in the account's state.
        self.users = Users(self._load_state, self._save_state, self._phone_chat_exists)
        _accounts[config.phone_number_id] = self

    # -- receiving ------------------------------------------------------------------

    def transport(self) -> WhatsAppWebhook:
        return WhatsAppWebhook(self)

    def claim_number(self) -> None:
        """This instance reads the notifications for its phone number id, whichever
        account's webhook Meta posts them to (the newest instance, after a reload)."""
        _accounts[self.config.phone_number_id] = self

    async def identify(self) -> None:
        if self.phone is None:
            await self._lookup_phone()

    async def _lookup_phone(self, timeout: float | None = None) -> dict[str, Any]:
        try:
            phone = await self.api.phone_number(timeout=timeout)
        except GraphError as exc:
            if exc.code == TOKEN_EXPIRED:
                self.context.report_problem(self.token_expired_problem, restartable=False)
            raise
        self.phone = phone
        digits = "".join(ch for ch in str(phone.get("display_phone_number", "")) if ch.isdigit())
        self.self_id = digits or None  # the business's own messages are never answered
        return phone

    def receive_trouble(self, error: Exception) -> Trouble:
        if isinstance(error, GraphError) and error.code == TOKEN_EXPIRED:
            return Trouble(TOKEN_REFUSED, wait=300.0, restartable=False, refused=True,
                           advice=self._token_advice())
        return super().receive_trouble(error)

    def _token_advice(self) -> str:
        return ("make a new access token for a system user in Meta Business Suite (Business "
                "settings, System users, Generate new token; permanent, with "
                "whatsapp_business_messaging), set it in "
                f"{self.account.config_key('access_token')} and restart the gateway")

    @property
    def token_expired_problem(self) -> str:
        """A refused access token, with what to do: the account's problem, the probe's
        detail and the reason of a send it stopped."""
        return f"{TOKEN_REFUSED}: {self._token_advice()}"

    def screen_inbound(self, message: InboundMessage) -> Verdict | None:
        """A message older than the account's ``max_message_age_minutes`` is recorded
        (the journal has it, so a redelivery is still a duplicate) but not answered:
        Meta redelivers for days after an outage, and a week-old question answered as
        if it were new helps nobody."""
        reason = stale_reason(message, self.account)
        if reason is None:
            return None
        log.warning("%s: message %s from %s not answered: %s", self.account.key,
                    message.message_id, message.sender_id, reason)
        return Verdict.deny(reason)

    async def normalize(self, event: Notification) -> InboundMessage | None:
        """A notification's message as an InboundMessage; a status is reported to the
        kernel (a failure surfaces as a failed delivery) and is not a message."""
        owner = self._owner(event)
        if owner is None:
            return None
        if event.kind == "status":
            await owner._status(event.data)
            return None
        if event.kind == "user_id_update":
            await owner._user_id_updated(event.data)
            return None
        return await owner._message(event.data, event.contacts)

    def _owner(self, event: Notification) -> "WhatsAppChannel | None":
        phone = event.phone_number_id
        if phone is None or phone == self.config.phone_number_id:
            return self
        owner = _accounts.get(phone)
        if owner is None:
            log.warning("%s: a notification for phone number id %s, which no account "
                        "serves, is ignored", self.account.key, phone)
        return owner

    async def _status(self, status: dict[str, Any]) -> None:
        state = status.get("status")
        if state not in ("sent", "delivered", "read", "failed"):
            return
        reason = code = None
        if state == "failed":
            errors = status.get("errors") or [{}]
            error = errors[0] if isinstance(errors[0], dict) else {}
            code = error.get("code")
            details = (error.get("error_data") or {}).get("details")
            reason = " — ".join(str(part) for part in (error.get("title") or
                                                        error.get("message"), details)
                                if part) or None
        await self.context.report_delivery_status(str(status["id"]), state, reason=reason,
                                                  code=code)

    async def _message(self, data: dict[str, Any], contacts: list[Any]) -> InboundMessage | None:
        kind = data.get("type")
        if kind == "system":
            await self._ids_changed(data)
            return None
        if kind in INBOUND_MEDIA:
            text = str((data.get(kind) or {}).get("caption") or "")
        else:
            text = _text_note(data)
            if text is None:  # a reaction, an order, an unsupported or unknown kind
                what = str(kind or "message without a type")
                log.info("%s: message %s from %s not answered: %s %s (the channel reads "
                         "text, replies to buttons and lists, locations, contacts and "
                         "files)", self.account.key, data.get("id"),
                         data.get("from") or data.get("from_user_id"),
                         "an" if what[0] in "aeiou" else "a", what)
                return None
        who = sender_of(data, contacts)
        if not who.ids:
            raise ValueError("the message names no sender")
        # The chat's stable id, whichever of the user's ids this payload carries; it is
        # the sender id too (what an allowlist or a pairing records).
        sender = await self.users.chat_of(who)
        # The user's other ids (phones, earlier BSUIDs): an allowlist or an approval may
        # name any of them. Nobody asks when anyone is let in.
        aliases: tuple[str, ...] = ()
        if "*" not in self.config.allow_from and self.config.dm_policy != "open":
            known = {*who.ids, *await self.users.aliases(sender)}
            known.discard(sender)
            aliases = tuple(sorted(known))
        media = [await self._download(data[kind], INBOUND_MEDIA[kind], kind,
                                      voice=bool(data[kind].get("voice")))] \
            if kind in INBOUND_MEDIA and isinstance(data.get(kind), dict) else []
        message_id = str(data["id"])
        self._remember(sender, message_id)
        context = data.get("context") or {}
        return InboundMessage(
            channel=self.name, account=self.account.name, chat_id=sender,
            message_id=message_id, sender_id=sender, sender_name=who.name,
            sender_aliases=aliases, text=text, route_extra=_address(who),
            reply_to_bot=bool(self.self_id and
                              "".join(ch for ch in str(context.get("from", "")) if ch.isdigit())
                              == self.self_id),
            media=media, timestamp=float(data.get("timestamp") or time.time()))

    async def _ids_changed(self, data: dict[str, Any]) -> None:
        """A user's ids changed (``system`` messages ``user_changed_number``,
        ``user_changed_user_id``): the new ones become aliases of the chat of the old,
        so their next messages continue it. Other system messages are logged, not
        answered."""
        system = data.get("system") or {}
        kind = system.get("type") if isinstance(system, dict) else None
        if kind not in ID_CHANGES:  # other system messages: nothing to learn
            log.info("%s: message %s from %s not answered: a system message (%s)",
                     self.account.key, data.get("id"),
                     data.get("from") or data.get("from_user_id"), kind or "of no type")
            return
        old = Sender(str(data.get("from") or ""),
                     str(system.get("previous_user_id") or data.get("from_user_id") or ""), "")
        await self._move_user(old, (system.get("user_id"), system.get("wa_id")))

    async def _user_id_updated(self, update: dict[str, Any]) -> None:
        """A ``user_id_update`` change's item (``{"wa_id", "user_id": {"previous",
        "current"}}``): as the ``system`` message ``user_changed_user_id``, the new BSUID
        (and the phone it names) continue the chat of the previous one."""
        ids = update.get("user_id") if isinstance(update.get("user_id"), dict) else {}
        await self._move_user(Sender("", previous_user_id(update), ""),
                              (ids.get("current"), update.get("wa_id")))

    async def _move_user(self, old: Sender, new_ids: tuple[Any, ...]) -> None:
        """The user known by ``old``'s ids is now (also) known by ``new_ids``: they become
        aliases of the chat of the old."""
        new = tuple(str(i) for i in new_ids if i)
        if not old.ids or not new:
            return
        chat = await self.users.chat_of(old)
        await self.users.link(chat, new)
        log.info("%s: the user of chat %s is now %s", self.account.key, chat, " / ".join(new))

    async def _load_state(self, key: str) -> Any:
        return None if self.context.store is None else await self.context.get_state(key)

    async def _save_state(self, key: str, value: Any) -> None:
        if self.context.store is not None:  # without a kernel (a unit test): memory only
            await self.context.set_state(key, value)

    async def _phone_chat_exists(self, phone: str) -> bool:
        """Whether a chat keyed by ``phone`` began before the user had a BSUID (its
        session has a reply route): it keeps that key, the BSUID becomes its alias."""
        store = self.context.store
        if store is None:
            return False
        key = Session.make_key(self.name, self.account.name, phone, None)
        return await store.get_route(key) is not None

    def _remember(self, chat_id: str, message_id: str) -> None:
        last = self._last_inbound
        last[chat_id] = message_id
        last.move_to_end(chat_id)
        while len(last) > LAST_INBOUND_CHATS:
            self._read.pop(last.popitem(last=False)[0], None)

    async def _download(self, item: dict[str, Any], kind: str, wa_type: str, *,
                        voice: bool = False) -> MediaRef:
        """A file by its media id: ``GET /{media-id}`` gives a short-lived URL, fetched
        with the token into the media store."""
        kind = "voice" if voice else kind
        media_id = str(item.get("id") or "")
        mime = item.get("mime_type")
        name = item.get("filename") or None
        try:
            info = await self.api.media_info(media_id)
            mime = info.get("mime_type") or mime
            size = int(info["file_size"]) if info.get("file_size") is not None else None
            if name is None:
                extension = mimetypes.guess_extension((mime or "").split(";")[0].strip()) or ""
                name = f"{wa_type}{extension}"
            context = self.context
            chunks = self.api.download(str(info["url"]), max_bytes=context.max_inbound_bytes)
            return await context.save_media(chunks, kind=kind, filename=name, mime=mime,
                                            platform_id=media_id, declared_size=size)
        except (PlatformError, KeyError, ValueError) as exc:
            return MediaRef(kind=kind, filename=name, mime=mime, platform_id=media_id,
                            note=f"not saved: {exc}")

    # -- sending --------------------------------------------------------------------------

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        try:
            if payload.is_media:
                wamid = await self._send_media(route, payload)
            else:
                text, _ = render_payload(payload, self.markup)
                try:
                    wamid = await self.api.send_message(_recipient(route), "text",
                                                        {"body": text}, reply_to=route.reply_to)
                except GraphError as exc:
                    if exc.code != OUTSIDE_WINDOW or self.config.template is None:
                        raise
                    try:
                        wamid = await self._send_template(route, text)
                    except GraphError as failed:
                        raise _explained(failed, f"not delivered: {WINDOW_CLOSED}, and "
                                                 f"the template failed too: {failed}") from None
        except GraphError as exc:
            raise self._send_error(exc) from None
        return SendResult(message_id=wamid)

    async def _send_media(self, route: Route, payload: OutboundPayload) -> str:
        path = Path(payload.media_path)  # type: ignore[arg-type]
        kind = payload.media_kind or "document"
        content: dict[str, Any] = {"id": await self._upload(path)}
        if payload.caption and kind in CAPTIONED:
            content["caption"], _ = render_payload(
                OutboundPayload(text=payload.caption, format=payload.format), self.markup)
        if kind == "document":
            content["filename"] = path.name
        return await self.api.send_message(_recipient(route), kind, content,
                                           reply_to=route.reply_to)

    async def _upload(self, path: Path) -> str:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime)
        if key not in self._uploaded:  # a retried send reuses the upload (ids last 30 days)
            self._uploaded[key] = await self.api.upload(path, media_mime(path))
        return self._uploaded[key]

    async def _send_template(self, route: Route, text: str) -> str:
        """The account's approved template instead of a text the window refused; its
        body parameters filled from the text (on one line: Meta refuses a parameter
        with a newline, a tab or more than four spaces in a row)."""
        template = self.config.template
        line = " ".join(text.split())
        content: dict[str, Any] = {"name": template.name,
                                   "language": {"policy": "deterministic",
                                                "code": template.language}}
        if template.parameters:
            content["components"] = [{"type": "body", "parameters": [
                {"type": "text", "text": parameter.replace("{text}", line)}
                for parameter in template.parameters]}]
        wamid = await self.api.send_message(_recipient(route), "template", content)
        log.info("%s: %s is outside the 24-hour window: sent as template %r", self.account.key,
                 route.chat_id, template.name)
        return wamid

    def _send_error(self, exc: GraphError) -> SendError:
        if exc.code == OUTSIDE_WINDOW:
            hint = ("a file cannot go as a template" if self.config.template is not None else
                    f"set channels.whatsapp.accounts.{self.account.name}.template to an "
                    "approved template to reach them")
            return _explained(exc, f"not delivered: {WINDOW_CLOSED}; {hint}, or wait until "
                                   "they write again")
        if exc.code == TOKEN_EXPIRED:
            self.context.report_problem(self.token_expired_problem, restartable=False)
            return _explained(exc, f"not sent: {self.token_expired_problem}")
        if exc.code == UNSUPPORTED_MEDIA:
            return _explained(exc, f"WhatsApp refused the file's type: {exc}")
        return exc.send_error()

    async def indicate(self, route: Route) -> None:
        """The read receipt for the chat's latest message and the typing indicator, in
        one request (WhatsApp shows typing until the reply, for at most 25 s)."""
        message_id = self._last_inbound.get(route.chat_id)
        if message_id is not None:
            await self.api.mark_read(message_id, typing=True)
            self._read[route.chat_id] = message_id

    async def mark_read(self, route: Route) -> None:
        """The read receipt alone for the chat's latest message (WhatsApp marks every
        earlier one read with it); none when that one is marked already."""
        chat = route.chat_id
        message_id = self._last_inbound.get(chat)
        if message_id is not None and self._read.get(chat) != message_id:
            await self.api.mark_read(message_id, typing=False)
            self._read[chat] = message_id

    # -- health ------------------------------------------------------------------------------

    async def probe(self) -> ProbeResult:
        try:
            phone = await self._lookup_phone(timeout=10)
        except GraphError as exc:
            if exc.code == TOKEN_EXPIRED:
                return ProbeResult(ok=False, detail=self.token_expired_problem, restartable=False)
            rejected = exc.status in (401, 403) or exc.code in (100, 200, 10)
            return ProbeResult(ok=False, detail=str(exc), restartable=not rejected)
        except PlatformError as exc:
            return ProbeResult(ok=False, detail=str(exc))
        if self.account.runtime.problem == self.token_expired_problem:
            self.context.clear_problem()  # a new token works
        number, name = phone.get("display_phone_number"), phone.get("verified_name")
        quality = phone.get("quality_rating")
        return ProbeResult(ok=True, detail=f"{number} ({name}), quality {quality}",
                           extra={"display_phone_number": number, "verified_name": name,
                                  "quality_rating": quality, "id": phone.get("id")})

    async def aclose(self) -> None:
        await self.api.close()
