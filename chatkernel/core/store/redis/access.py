"""Pairing requests and approved senders in the Redis store (docs/access.md; the keys
are in docs/scale-out.md): each change one script, so several gateways share them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chatkernel.core.store.base import ApprovedSender, PairingRequest
from chatkernel.core.store.redis.connection import RedisConnection
from chatkernel.core.store.redis.keys import _acct, _num, _part
from chatkernel.sdk.codec import decode_json, encode_json

__all__ = ["RedisAccess"]


def _request_json(request: PairingRequest) -> str:
    """A request as stored; ``last_sent_at`` is kept beside it (scripts change it)."""
    return encode_json({"code": request.code, "channel": request.channel,
                        "account": request.account, "sender": request.sender,
                        "name": request.name, "chat": request.chat,
                        "created_at": float(request.created_at),
                        "expires_at": float(request.expires_at)}, what="PairingRequest")


def _request(text: str, last_sent_at: str) -> PairingRequest:
    data = decode_json(text)
    return PairingRequest(code=data["code"], channel=data["channel"], account=data["account"],
                          sender=data["sender"], name=data.get("name") or "",
                          chat=data["chat"], created_at=data["created_at"],
                          expires_at=data["expires_at"], last_sent_at=float(last_sent_at))


def _account_of(acct: str) -> tuple[str, str]:
    """``(channel, account)`` of an account key part (the inverse of ``_acct``)."""
    channel, account = acct.split(":", 1)
    return channel.replace("%3A", ":").replace("%25", "%"), account


class RedisAccess(RedisConnection):
    """Strangers' pending requests (``pairing:*``) and approved senders (``approved*``)."""

    async def pairing_request(self, request: PairingRequest, *, resend_after: float,
                              max_pending: int) -> tuple[str, PairingRequest | None]:
        self._writable("pairing_request")
        answer = await self._script("PAIRING_REQUEST", "pairing_request", [
            _acct(request.channel, request.account), request.sender,
            f"{_part(request.channel)}:{request.code}", _request_json(request),
            _num(request.created_at), _num(request.expires_at), _num(resend_after),
            int(max_pending)])
        outcome = answer[0]
        return outcome, (_request(answer[1], answer[2]) if len(answer) > 1 else None)

    async def pairing_requests(self, channel: str | None = None, *,
                               now: float) -> list[PairingRequest]:
        self._check_open()
        flat = await self._script("PAIRING_LIST", "pairing_requests", [
            "" if channel is None else f"{_part(channel)}:", _num(now)])
        return [_request(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]

    async def pairing_resolve(self, channel: str, code: str, *, approve: bool, now: float,
                              account: str | None = None) -> PairingRequest | None:
        self._writable("pairing_resolve")
        answer = await self._script("PAIRING_RESOLVE", "pairing_resolve", [
            f"{_part(channel)}:{code}", "" if account is None else _acct(channel, account),
            "1" if approve else "0", _num(now)])
        return _request(answer[0], answer[1]) if answer else None

    async def approved_senders(self, channel: str | None = None) -> list[ApprovedSender]:
        self._check_open()
        redis, prefix = self._redis, self.prefix
        accts = sorted(await self._call("approved_senders", redis.smembers(prefix + "approved")))
        found: list[ApprovedSender] = []
        for acct in accts:
            channel_name, account = _account_of(acct)
            if channel is not None and channel_name != channel:
                continue
            senders: dict[Any, Any] = await self._call(
                "approved_senders", redis.hgetall(f"{prefix}approved:{acct}"))
            found += sorted((ApprovedSender(channel_name, account, sender, float(at))
                             for sender, at in senders.items()),
                            key=lambda a: (a.approved_at, a.sender))
        return found

    async def is_approved(self, channel: str, account: str, senders: Sequence[str]) -> bool:
        self._check_open()
        key = f"{self.prefix}approved:{_acct(channel, account)}"
        if len(senders) == 1:
            return bool(await self._call("is_approved", self._redis.hexists(key, senders[0])))
        found = await self._call("is_approved", self._redis.hmget(key, list(senders)))
        return any(value is not None for value in found)

    async def revoke_sender(self, channel: str, account: str, sender: str) -> bool:
        self._writable("revoke_sender")
        key = f"{self.prefix}approved:{_acct(channel, account)}"
        return bool(await self._call("revoke_sender", self._redis.hdel(key, sender)))

    async def prune_pairing(self, now: float) -> int:
        self._writable("prune_pairing")
        return int(await self._script("PAIRING_PRUNE", "prune_pairing", [_num(now)]))
