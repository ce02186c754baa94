"""Backups of a home: one archive (tar.gz, 0600) holding the state, the config file and
the home's ``.env``, with a manifest of checksums; and their restore
(``chatkernel backup`` / ``restore``, docs/operations.md).

The SQLite state is copied with SQLite's online backup API from a read-only connection,
so a running gateway goes on writing meanwhile and the copy is one consistent moment of
it. A Redis store's keys (those under ``[store] prefix``) are exported with ``DUMP`` and
their time to live, and restored with ``RESTORE``. Either way the outbox comes back as
it was: an unsent entry is sent by the next start, one marked ``sending`` is reported
"delivery unknown", as after any stop (docs/outbound.md).

A restore refuses a running gateway, a newer schema and a checksum that does not match;
it moves what it replaces aside (``<name>.before-restore-<time>``) and puts it back
when anything fails.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import sqlite3
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatkernel import __version__
from chatkernel.core.store.base import StoreError

if TYPE_CHECKING:
    from chatkernel.core.config.schema import KernelConfig

#: The archive's layout; a restore refuses a higher one.
FORMAT = 1
MANIFEST = "manifest.json"
#: The members by role: the state (one of the two), the config file, the home's env file.
SQLITE_MEMBER, REDIS_MEMBER = "state.db", "redis.jsonl"
CONFIG_MEMBER, ENV_MEMBER = "config.toml", ".env"


class BackupError(StoreError):
    """A backup that cannot be made, or an archive that must not be restored (why, in
    words a person acts on)."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What a restore put in place, and where what it replaced went."""

    files: list[Path]
    aside: list[Path]
    redis_keys: int = 0


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# -- making one ------------------------------------------------------------------------------


async def create(config: KernelConfig, config_path: Path, home: Path, archive: Path
                 ) -> dict[str, Any]:
    """Write ``archive``: the state, ``config_path`` (when it exists) and the home's
    ``.env`` (when there is one), with the manifest; returns the manifest."""
    with tempfile.TemporaryDirectory(prefix="chatkernel-backup-") as scratch:
        directory = Path(scratch)
        store: dict[str, Any] = {"backend": config.store.backend}
        if config.store.backend == "redis":
            store["prefix"] = config.store.prefix
            store["schema"], store["keys"] = await _dump_redis(
                config.store.url or "redis://127.0.0.1:6379/0", config.store.prefix,
                directory / REDIS_MEMBER)
            members = [REDIS_MEMBER]
        else:
            store["schema"] = _copy_sqlite(config.store_path(), directory / SQLITE_MEMBER)
            members = [SQLITE_MEMBER]
        for source, member in ((config_path, CONFIG_MEMBER), (home / ".env", ENV_MEMBER)):
            if source.is_file():
                (directory / member).write_bytes(source.read_bytes())
                members.append(member)
        manifest = {
            "format": FORMAT, "kernel_version": __version__, "created_at": time.time(),
            "store": store,
            "files": [{"name": name, "size": (directory / name).stat().st_size,
                       "sha256": _sha256(directory / name)} for name in members],
        }
        _write_archive(archive, directory, members, manifest)
    return manifest


def _copy_sqlite(database: Path, copy: Path) -> int:
    """A consistent copy of ``database`` through the online backup API; its schema
    version. (A gateway writing meanwhile is not stopped: the copy restarts over pages
    written during it, and SQLite's WAL readers never block its writer.)"""
    if not database.exists():
        raise BackupError(f"no state database at {database}: nothing to back up yet "
                          "(the gateway creates it on its first start)")
    source = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    target = sqlite3.connect(copy)
    try:
        source.backup(target, pages=1024)
        version = int(target.execute("PRAGMA user_version").fetchone()[0])
        # One file: the copy's own log folded in, so the archive holds no -wal.
        target.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.Error as exc:
        raise BackupError(f"cannot copy the state database {database}: {exc}") from None
    finally:
        target.close()
        source.close()
    os.chmod(copy, 0o600)
    return version


async def _dump_redis(url: str, prefix: str, out: Path) -> tuple[int, int]:
    """Every key under ``prefix``, a JSON line each (name, time to live in ms, DUMP's
    value, base64); the layout version in its ``meta`` hash, and how many keys."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    count = 0
    try:
        schema = int(await client.hget(f"{prefix}meta", "schema") or 0)
        with open(out, "w", encoding="utf-8") as file:
            async for key in client.scan_iter(match=_glob(prefix) + "*", count=1000):
                value = await client.dump(key)
                if value is None:  # gone since the scan
                    continue
                ttl = await client.pttl(key)
                file.write(json.dumps({"key": base64.b64encode(key).decode(),
                                       "ttl": max(int(ttl), 0),
                                       "value": base64.b64encode(value).decode()}) + "\n")
                count += 1
    finally:
        await client.aclose()
    os.chmod(out, 0o600)
    return schema, count


def _glob(prefix: str) -> str:
    """``prefix`` with SCAN's pattern characters escaped."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix)


def _write_archive(archive: Path, directory: Path, members: list[str],
                   manifest: dict[str, Any]) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as file, tarfile.open(fileobj=file, mode="w:gz") as tar:
            data = json.dumps(manifest, indent=2).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
            for name in members:
                tar.add(directory / name, arcname=name, recursive=False,
                        filter=_private)
        os.chmod(partial, 0o600)
        os.replace(partial, archive)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _private(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mode, info.uid, info.gid, info.uname, info.gname = 0o600, 0, 0, "", ""
    return info


# -- reading and checking one ---------------------------------------------------------------


def read(archive: Path, into: Path) -> dict[str, Any]:
    """Unpack ``archive`` into the directory ``into``, check it whole (its format, every
    file's checksum, nothing but the files its manifest lists) and return the manifest."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            names = tar.getnames()
            if MANIFEST not in names:
                raise BackupError(f"{archive}: no {MANIFEST}: not a chatkernel backup")
            manifest = json.loads(tar.extractfile(MANIFEST).read())  # type: ignore[union-attr]
            listed = {entry["name"] for entry in manifest.get("files", [])}
            known = {SQLITE_MEMBER, REDIS_MEMBER, CONFIG_MEMBER, ENV_MEMBER}
            unexpected = (set(names) - {MANIFEST} - listed) | (listed - known)
            if unexpected:  # nothing but what a restore puts in place is unpacked
                raise BackupError(f"{archive}: unexpected files {sorted(unexpected)}")
            for name in listed:
                member = tar.getmember(name)
                if not member.isfile():
                    raise BackupError(f"{archive}: {name} is not a file")
                source = tar.extractfile(member)
                fd = os.open(into / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as target:
                    target.write(source.read())  # type: ignore[union-attr]
    except (tarfile.TarError, OSError, ValueError, KeyError) as exc:
        raise BackupError(f"{archive}: cannot be read as a backup: {exc}") from None
    if int(manifest.get("format", 0)) > FORMAT:
        raise BackupError(f"{archive} has backup format {manifest['format']}, newer than "
                          f"this chatkernel reads ({FORMAT}): upgrade chatkernel "
                          f"({manifest.get('kernel_version')} made it)")
    for entry in manifest["files"]:
        if _sha256(into / entry["name"]) != entry["sha256"]:
            raise BackupError(f"{archive}: {entry['name']} does not match its checksum: "
                              "the archive is damaged or was changed; nothing was restored")
    return manifest


def check_schema(manifest: dict[str, Any]) -> None:
    """Refuse a state written by a newer chatkernel (a higher schema version)."""
    store = manifest.get("store", {})
    if store.get("backend") == "redis":
        from chatkernel.core.store.redis.connection import SCHEMA_VERSION
    else:
        from chatkernel.core.store.sqlite.schema import SCHEMA_VERSION
    version = int(store.get("schema", 0))
    if version > SCHEMA_VERSION:
        raise BackupError(
            f"the backup's state has schema version {version}, but this chatkernel knows "
            f"up to {SCHEMA_VERSION} (chatkernel {manifest.get('kernel_version')} made "
            "it): upgrade chatkernel first (pip install --upgrade chatkernel)")


# -- restoring one ---------------------------------------------------------------------------


async def restore(archive: Path, home: Path, config_path: Path,
                  locate: Callable[[Path | None], tuple[Path, str | None]]) -> Restored:
    """Put the archive's state and files in place for the home (the gateway stopped:
    the caller holds the home's lock). ``locate(config)`` says where the state goes,
    ``(SQLite database, Redis URL)``, given the archive's config file unpacked (None
    when it holds none)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory(prefix="chatkernel-restore-") as scratch:
        directory = Path(scratch)
        manifest = read(archive, directory)
        check_schema(manifest)
        names = {entry["name"] for entry in manifest["files"]}
        database, redis_url = locate(directory / CONFIG_MEMBER if CONFIG_MEMBER in names
                                     else None)
        moves: list[tuple[Path, Path]] = []  # (source in scratch, destination)
        if SQLITE_MEMBER in names:
            moves.append((directory / SQLITE_MEMBER, database))
        if CONFIG_MEMBER in names:
            moves.append((directory / CONFIG_MEMBER, config_path))
        if ENV_MEMBER in names:
            moves.append((directory / ENV_MEMBER, home / ".env"))
        aside: list[tuple[Path, Path]] = []
        placed: list[Path] = []
        try:
            for source, target in moves:
                related = [target, *(Path(f"{target}{s}") for s in ("-wal", "-shm"))] \
                    if source.name == SQLITE_MEMBER else [target]
                for path in related:
                    if path.exists():
                        kept = path.with_name(f"{path.name}.before-restore-{stamp}")
                        os.replace(path, kept)
                        aside.append((path, kept))
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                os.replace(source, target) if _same_device(source, target) else \
                    _copy(source, target)
                os.chmod(target, 0o600)
                placed.append(target)
            keys = 0
            if REDIS_MEMBER in names:
                store = manifest["store"]
                url = redis_url or "redis://127.0.0.1:6379/0"
                keys = await _restore_redis(url, store["prefix"], directory / REDIS_MEMBER,
                                            home / f"redis.before-restore-{stamp}.jsonl")
        except BaseException:
            for path in placed:
                path.unlink(missing_ok=True)
            for path, kept in reversed(aside):
                os.replace(kept, path)
            raise
    return Restored(placed, [kept for _, kept in aside], keys)


def _same_device(source: Path, target: Path) -> bool:
    try:
        return source.stat().st_dev == target.parent.stat().st_dev
    except OSError:
        return False


def _copy(source: Path, target: Path) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(source.read_bytes())


async def _restore_redis(url: str, prefix: str, dump: Path, aside: Path) -> int:
    """Replace the keys under ``prefix`` by the dump's: the current ones exported to
    ``aside`` first, and put back when the restore fails."""
    import redis.asyncio as aioredis

    await _dump_redis(url, prefix, aside)
    client = aioredis.from_url(url)
    try:
        try:
            count = await _replace_keys(client, prefix, dump)
        except BaseException:
            await _replace_keys(client, prefix, aside)
            raise
    finally:
        await client.aclose()
    return count


async def _replace_keys(client: Any, prefix: str, dump: Path) -> int:
    async for key in client.scan_iter(match=_glob(prefix) + "*", count=1000):
        await client.delete(key)
    count = 0
    with open(dump, encoding="utf-8") as file:
        for text in file:
            entry = json.loads(text)
            await client.restore(base64.b64decode(entry["key"]), int(entry["ttl"]),
                                 base64.b64decode(entry["value"]), replace=True)
            count += 1
    return count
