"""Pairing requests and approved senders in the SQLite store (docs/access.md)."""

from __future__ import annotations

from collections.abc import Sequence

from chatkernel.core.store.base import ApprovedSender, PairingRequest
from chatkernel.core.store.sqlite.commit import GroupCommit

__all__ = ["SQLiteAccess"]

_REQUEST_COLUMNS = ("code, channel, account, sender, name, chat, created_at, expires_at,"
                    " last_sent_at")


class SQLiteAccess(GroupCommit):
    """Strangers' pending requests and the senders the owner approved.

    Each method's statements run with no await between them on the store's one
    connection, so a request's checks and its write are one step."""

    async def pairing_request(self, request: PairingRequest, *, resend_after: float,
                              max_pending: int) -> tuple[str, PairingRequest | None]:
        now, where = request.created_at, (request.channel, request.account)
        if self._run("SELECT 1 FROM pairing_requests WHERE channel = ? AND account = ?"
                     " AND expires_at <= ? LIMIT 1", (*where, now)).fetchone():
            self._write("DELETE FROM pairing_requests WHERE channel = ? AND account = ?"
                        " AND expires_at <= ?", (*where, now))
        row = self._run(f"SELECT {_REQUEST_COLUMNS} FROM pairing_requests WHERE channel = ?"
                        " AND account = ? AND sender = ?", (*where, request.sender)).fetchone()
        if row is not None:
            pending = PairingRequest(*row)
            if now - pending.last_sent_at < resend_after:
                return "quiet", pending
            pending.last_sent_at = now
            self._write("UPDATE pairing_requests SET last_sent_at = ? WHERE channel = ?"
                        " AND account = ? AND sender = ?", (now, *where, request.sender))
            return "resend", pending
        (count,) = self._run("SELECT count(*) FROM pairing_requests WHERE channel = ?"
                             " AND account = ?", where).fetchone()
        if count >= max_pending:
            return "full", None
        if self._run("SELECT 1 FROM pairing_requests WHERE channel = ? AND code = ?",
                     (request.channel, request.code)).fetchone():
            return "taken", None
        self._write(f"INSERT INTO pairing_requests ({_REQUEST_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (request.code, request.channel, request.account, request.sender,
                     request.name, request.chat, request.created_at, request.expires_at,
                     request.last_sent_at))
        return "new", request

    async def pairing_requests(self, channel: str | None = None, *,
                               now: float) -> list[PairingRequest]:
        sql = f"SELECT {_REQUEST_COLUMNS} FROM pairing_requests WHERE expires_at > ?"
        params: tuple[object, ...] = (now,)
        if channel is not None:
            sql, params = sql + " AND channel = ?", (now, channel)
        rows = self._run(sql + " ORDER BY created_at, channel, code", params).fetchall()
        return [PairingRequest(*row) for row in rows]

    async def pairing_resolve(self, channel: str, code: str, *, approve: bool, now: float,
                              account: str | None = None) -> PairingRequest | None:
        row = self._run(f"SELECT {_REQUEST_COLUMNS} FROM pairing_requests WHERE channel = ?"
                        " AND code = ?", (channel, code)).fetchone()
        if row is None:
            return None
        request = PairingRequest(*row)
        if account is not None and request.account != account:
            return None
        self._write("DELETE FROM pairing_requests WHERE channel = ? AND code = ?",
                    (channel, code))
        if request.expires_at <= now:
            return None
        if approve:
            self._write("INSERT INTO approved_senders (channel, account, sender, approved_at)"
                        " VALUES (?, ?, ?, ?) ON CONFLICT (channel, account, sender)"
                        " DO UPDATE SET approved_at = excluded.approved_at",
                        (channel, request.account, request.sender, now))
        return request

    async def approved_senders(self, channel: str | None = None) -> list[ApprovedSender]:
        sql = "SELECT channel, account, sender, approved_at FROM approved_senders"
        params: tuple[str, ...] = ()
        if channel is not None:
            sql, params = sql + " WHERE channel = ?", (channel,)
        rows = self._run(sql + " ORDER BY channel, account, approved_at, sender",
                         params).fetchall()
        return [ApprovedSender(*row) for row in rows]

    async def is_approved(self, channel: str, account: str, senders: Sequence[str]) -> bool:
        if len(senders) == 1:  # nearly always: one statement text, kept prepared
            return self._run("SELECT 1 FROM approved_senders WHERE channel = ?"
                             " AND account = ? AND sender = ?",
                             (channel, account, senders[0])).fetchone() is not None
        marks = ", ".join("?" * len(senders))
        return self._run(f"SELECT 1 FROM approved_senders WHERE channel = ? AND account = ?"
                         f" AND sender IN ({marks}) LIMIT 1",
                         (channel, account, *senders)).fetchone() is not None

    async def revoke_sender(self, channel: str, account: str, sender: str) -> bool:
        cursor = self._write("DELETE FROM approved_senders WHERE channel = ? AND account = ?"
                             " AND sender = ?", (channel, account, sender))
        return cursor.rowcount > 0

    async def prune_pairing(self, now: float) -> int:
        if not self._run("SELECT 1 FROM pairing_requests WHERE expires_at <= ? LIMIT 1",
                         (now,)).fetchone():
            return 0
        return self._write("DELETE FROM pairing_requests WHERE expires_at <= ?",
                           (now,)).rowcount
