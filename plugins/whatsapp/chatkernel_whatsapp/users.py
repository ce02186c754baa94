"""Who wrote: a WhatsApp user's phone number, business-scoped user id and chat.

Meta is giving users usernames and every user a business-scoped user id (BSUID:
``US.13491208655302741918``), through 2026. A message may name its sender by phone
(``messages[].from``, ``contacts[].wa_id``), by BSUID (``messages[].from_user_id``,
``contacts[].user_id``), or both; a user with a username may come with no phone at all.
One user is one chat whichever ids a payload carries, so :class:`Users` keeps, per
account and across restarts (the account state of ChannelContext), which chat each of
a user's ids belongs to:

- a chat's id is the id it was first known by: the BSUID when the first payload had one;
  the phone for a chat that began before BSUIDs (its session and history stay where they
  are: the kernel keys sessions by chat id and has no way to rename one);
- every other id of the user is an alias of it (``chat:<id>`` → the chat id), and the
  chat lists its aliases (``user:<chat>``), so an allowlist may name any of them;
- a BSUID that changes (the user changed their number: a ``system`` message
  ``user_changed_number`` or ``user_changed_user_id``) becomes another alias, and the
  chat goes on under its id.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Sender", "Users", "is_user_id", "sender_of"]

#: Ids kept in memory (the account state has them all).
CACHED_IDS = 100_000


def is_user_id(value: str) -> bool:
    """Whether ``value`` is a BSUID (``CC.<digits and letters>``) rather than a phone
    number (digits only)."""
    return "." in value


class Sender:
    """The ids a message names its sender by, and the name to show."""

    __slots__ = ("name", "phone", "user_id")

    def __init__(self, phone: str, user_id: str, name: str) -> None:
        self.phone, self.user_id, self.name = phone, user_id, name

    @property
    def ids(self) -> tuple[str, ...]:
        """The ids present, the BSUID first."""
        return tuple(i for i in (self.user_id, self.phone) if i)


def sender_of(message: dict[str, Any], contacts: list[Any]) -> Sender:
    """The sender of an inbound message: its phone (``from``, else its contact's
    ``wa_id``), its BSUID (``from_user_id``, else its contact's ``user_id``) and its
    name (the profile's name, else the username: a user with a username may have set
    no name). The contact is the one naming the same phone or BSUID, else the only one."""
    phone = str(message.get("from") or "")
    user_id = str(message.get("from_user_id") or "")
    people = [c for c in contacts if isinstance(c, dict)]
    contact = next((c for c in people if (phone and str(c.get("wa_id") or "") == phone)
                    or (user_id and str(c.get("user_id") or "") == user_id)), None)
    if contact is None and len(people) == 1:
        contact = people[0]
    name = ""
    if contact is not None:
        phone = phone or str(contact.get("wa_id") or "")
        user_id = user_id or str(contact.get("user_id") or "")
        profile = contact.get("profile") or {}
        if isinstance(profile, dict):
            name = str(profile.get("name") or profile.get("username") or "")
    return Sender(phone, user_id, name)


class Users:
    """Each user id's chat, for one account (see the module docstring). ``load`` and
    ``save`` read and write the account's state (ChannelContext.get_state / set_state);
    ``legacy(phone)`` says whether a chat keyed by that phone already exists."""

    def __init__(self, load: Callable[[str], Awaitable[Any]],
                 save: Callable[[str, Any], Awaitable[None]],
                 legacy: Callable[[str], Awaitable[bool]]) -> None:
        self._load, self._save, self._legacy = load, save, legacy
        # id -> its chat id (a chat's own id too), least recently used first
        self._chats: OrderedDict[str, str] = OrderedDict()
        # chat id -> its aliases, for the chats read or written in this process
        self._aliases: dict[str, set[str]] = {}

    def cached(self, ids: tuple[str, ...]) -> str | None:
        """The chat of ``ids`` if memory knows it and every id of them is known."""
        chats = self._chats
        chat = chats.get(ids[0])
        if chat is None or any(chats.get(i) != chat for i in ids[1:]):
            return None
        return chat

    async def chat_of(self, sender: Sender) -> str:
        """The chat of a message's sender, learning the aliases its ids make."""
        ids = sender.ids
        chat = self.cached(ids)
        if chat is not None:
            return chat
        chat = next((self._chats[i] for i in ids if i in self._chats), None)
        if chat is None:
            for i in ids:
                chat = await self._load(f"chat:{i}")
                if chat is not None:
                    break
        if chat is None:
            # New to this account: the BSUID, unless the phone's chat began before BSUIDs.
            chat = ids[0]
            if sender.user_id and sender.phone and await self._legacy(sender.phone):
                chat = sender.phone
        await self.link(chat, ids)
        return chat

    async def link(self, chat: str, ids: tuple[str, ...]) -> None:
        """Make every id of ``ids`` one of ``chat``'s (an alias, where not its own id)."""
        new = [i for i in ids if i != chat and self._chats.get(i) != chat]
        self._remember(chat, chat)
        for i in ids:
            self._remember(i, chat)
        if not new:
            return
        aliases = await self.aliases(chat)
        for i in new:
            await self._save(f"chat:{i}", chat)
        aliases.update(new)
        await self._save(f"user:{chat}", sorted(aliases))

    async def aliases(self, chat: str) -> set[str]:
        """The other ids of ``chat`` (phones, earlier BSUIDs)."""
        known = self._aliases.get(chat)
        if known is None:
            known = self._aliases[chat] = set(await self._load(f"user:{chat}") or ())
        return known

    def _remember(self, user_id: str, chat: str) -> None:
        chats = self._chats
        chats[user_id] = chat
        chats.move_to_end(user_id)
        while len(chats) > CACHED_IDS:
            chats.popitem(last=False)
