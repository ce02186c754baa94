"""The Redis store's :class:`~chatkernel.core.store.shared.SharedState`: leases and
fencing, the per-account inbox streams, the live instances."""

from __future__ import annotations

import time
from typing import Any

from chatkernel.core.store.base import JournalEntry, OutboxEntry
from chatkernel.core.store.redis.connection import RedisConnection
from chatkernel.core.store.redis.keys import _acct
from chatkernel.core.store.shared import account_lease
from chatkernel.sdk.codec import (
    decode_json,
    decode_message,
    decode_payload,
    decode_route,
    encode_json,
)

__all__ = ["RedisCoordination"]


def _inbox_item(fields: dict[str, str]) -> JournalEntry | OutboxEntry:
    """An inbox stream's entry: a journaled message, or a payload queued elsewhere."""
    if "o" in fields:
        return OutboxEntry(
            id=int(fields["o"]), reply_id=fields["r"], session_key=fields["k"],
            session_id=fields["i"], channel=fields["c"], account=fields["n"],
            route=decode_route(fields["ro"]), payload=decode_payload(fields["p"]),
            status=fields["s"], error=None, created_at=float(fields["t"]))
    return JournalEntry(seq=int(fields["seq"]), message=decode_message(fields["m"]),
                        status="received", received_at=float(fields["t"]))


class RedisCoordination(RedisConnection):
    """Leases, fences, inbox streams and instances (the methods of SharedState)."""

    # -- SharedState: leases and fencing ---------------------------------------------------------

    @staticmethod
    def _ms(ttl: float) -> int:
        if not ttl > 0:
            raise ValueError(f"a lease's ttl must be > 0 seconds, not {ttl!r}")
        return max(1, round(ttl * 1000))

    async def acquire_lease(self, name: str, holder: str, ttl: float) -> int | None:
        self._writable("acquire_lease")
        token = await self._script("LEASE_ACQUIRE", f"acquire_lease {name!r}",
                                   [name, holder, self._ms(ttl)])
        return None if token is None else int(token)

    async def renew_lease(self, name: str, holder: str, token: int, ttl: float) -> bool:
        self._writable("renew_lease")
        return bool(await self._script("LEASE_RENEW", f"renew_lease {name!r}",
                                       [name, holder, int(token), self._ms(ttl)]))

    async def release_lease(self, name: str, holder: str, token: int) -> None:
        self._writable("release_lease")
        await self._script("LEASE_RENEW", f"release_lease {name!r}",
                           [name, holder, int(token), ""])

    async def leases(self) -> dict[str, tuple[str, int, float]]:
        flat = await self._script("LEASES", "leases", ["0" if self.read_only else "1"])
        # PTTL -1 (no expiry) cannot happen for a lease; read it as no time left.
        return {flat[i]: (flat[i + 1], int(flat[i + 2]), max(int(flat[i + 3]), 0) / 1000)
                for i in range(0, len(flat), 4)}

    def hand_sends_to_owners(self) -> None:
        self._to_owners = True

    def fence(self, channel: str, account: str, token: int | None) -> None:
        if token is None:
            self._fences.pop((channel, account), None)
        else:
            self._fences[channel, account] = (account_lease(channel, account), str(int(token)))
        self._mark_fences = [part for (fenced_channel, fenced_account), fence
                             in self._fences.items()
                             for part in (_acct(fenced_channel, fenced_account), *fence)]

    # -- SharedState: inbox streams -----------------------------------------------------------

    def _inbox(self, channel: str, account: str) -> str:
        return f"{self.prefix}inbox:{_acct(channel, account)}"

    async def inbox_position(self, channel: str, account: str) -> str:
        self._check_open()
        last = await self._call("inbox_position", self._redis.xrevrange(
            self._inbox(channel, account), count=1))
        return last[0][0] if last else "0-0"

    async def read_inbox(self, positions: dict[tuple[str, str], str], timeout: float
                         ) -> list[tuple[tuple[str, str], str, JournalEntry | OutboxEntry]]:
        self._check_open()
        if not positions:
            return []
        streams = {self._inbox(*account): position for account, position in positions.items()}
        accounts = {self._inbox(*account): account for account in positions}
        block = max(1, round(timeout * 1000)) if timeout > 0 else None
        answer = await self._call("read_inbox", self._blocking.xread(streams, block=block))
        found: list[tuple[tuple[str, str], str, JournalEntry | OutboxEntry]] = []
        for stream, items in answer or ():  # each stream in its order
            account = accounts[stream]
            for entry_id, fields in items:
                found.append((account, entry_id, _inbox_item(fields)))
        return found

    # -- SharedState: instances -------------------------------------------------------------------

    async def register_instance(self, instance_id: str, info: dict[str, Any],
                                ttl: float) -> None:
        self._writable("register_instance")
        text = encode_json(info, what="instance info")
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(f"{self.prefix}instance:{instance_id}", text, px=self._ms(ttl))
        pipe.sadd(self.prefix + "instances", instance_id)
        await self._call("register_instance", pipe.execute())

    async def unregister_instance(self, instance_id: str) -> None:
        self._writable("unregister_instance")
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(f"{self.prefix}instance:{instance_id}")
        pipe.srem(self.prefix + "instances", instance_id)
        await self._call("unregister_instance", pipe.execute())

    async def instances(self) -> dict[str, dict[str, Any]]:
        flat = await self._script("INSTANCES", "instances", ["0" if self.read_only else "1"])
        return {flat[i]: decode_json(flat[i + 1]) for i in range(0, len(flat), 2)}

    async def ping(self) -> float:
        self._check_open()
        start = time.perf_counter()
        await self._call("ping", self._redis.ping())
        return time.perf_counter() - start
