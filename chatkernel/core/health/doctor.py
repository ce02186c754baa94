"""``chatkernel doctor``: what is wrong with an installation, check by check, each with
what it found and what fixes it (docs/operations.md, "Doctor").

The checks here are functions of what they are given (the plugin manager, the config
as written and parsed, the probes' results, the security audit's findings) or read the
files and servers they name; the CLI (chatkernel.cli.doctor) runs the kernel's own checks
and the live probes and hands their answers in. :func:`checkpoint_wal` is the one fix
this module makes itself; the file modes are the audit's (:func:`~chatkernel.core.health.
audit.fix_modes`).

No channel is named here: a channel tells doctor what only it knows through its probe's
``ProbeResult.extra`` (:data:`SERVER_DATE`, :data:`FINDINGS`) and its transport's
optional methods (docs/writing-a-channel.md).
"""

from __future__ import annotations

import email.utils
import http.client
import os
import secrets
import shutil
import socket
import sqlite3
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from chatkernel import __version__
from chatkernel.core.config.env import ENV_REFERENCE

if TYPE_CHECKING:
    from aiohttp import web

    from chatkernel.core.config.deprecations import DeprecatedKey
    from chatkernel.core.config.schema import KernelConfig
    from chatkernel.core.gateway_state import GatewayInfo
    from chatkernel.core.health.audit import Finding
    from chatkernel.core.plugins import PluginManager
    from chatkernel.sdk.models import ProbeResult

Status = Literal["ok", "warn", "fail"]

#: A write-ahead log past this size means checkpoints are not keeping up (a reader
#: holding a snapshot open): every read walks it.
WAL_WARN_BYTES = 64 * 1024 * 1024
#: Free space below these on the state database's file system: a warning, a failure
#: (a full disk stops every commit; nothing is lost, but nothing is answered).
DISK_WARN_BYTES = 1024 ** 3
DISK_FAIL_BYTES = 100 * 1024 ** 2
#: Clock skew against a platform past which a warning, a failure: Slack refuses
#: signatures older than five minutes, and a skewed clock makes every one look so.
SKEW_WARN_SECONDS = 30.0
SKEW_FAIL_SECONDS = 300.0
#: The Redis version docs/scale-out.md asks for.
REDIS_MAJOR = 7
#: The optional key of ``ProbeResult.extra`` a channel's probe may fill with its
#: platform's ``Date`` header (docs/writing-a-channel.md): the clock check reads it.
SERVER_DATE = "server_date"
#: The optional key of ``ProbeResult.extra`` where a channel's probe lists what it found
#: besides the probe's own answer, each a check of doctor's: ``{"check": "scopes",
#: "status": "ok" | "warn" | "fail", "message": ..., "fix": ...}`` (docs/writing-a-
#: channel.md): the scopes a token lacks, a token near its end.
FINDINGS = "findings"
#: The header the gateway's HTTP server puts on every answer: a mark made at random when
#: the gateway starts, by which doctor tells this gateway's answers through a public URL
#: from a proxy's or another server's (:func:`webhook_url_checks`). It says nothing about
#: the gateway: it only matches what the same process answers on its own address.
GATEWAY_HEADER = "X-Chatkernel-Gateway"


@dataclass(frozen=True, slots=True)
class Check:
    """One check's outcome: a stable id (``store.integrity``, ``account.telegram:main``),
    ok / warn / fail, what was found, and the command or key that fixes it."""

    id: str
    status: Status
    message: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "status": self.status, "message": self.message,
                "fix": self.fix}


def report(checks: Iterable[Check]) -> dict[str, Any]:
    """What ``doctor --json`` prints: ``ok`` (no check failed) and every check."""
    found = list(checks)
    return {"ok": all(check.status != "fail" for check in found),
            "checks": [check.as_dict() for check in found]}


# -- versions and plugins ----------------------------------------------------------------


def version_checks(pm: PluginManager) -> list[Check]:
    """Python against what chatkernel requires; each plugin loaded, and its distribution's
    requirement on chatkernel met by the one installed."""
    checks = [_python_check()]
    for name, reason in sorted(pm.load_errors.items()):
        checks.append(Check(
            f"plugin.{name}", "fail", f"plugin {name!r} failed to load: {reason}",
            f"reinstall or upgrade it (pip install --upgrade <its distribution>), or leave "
            f"it out: CHATKERNEL_DISABLE_PLUGINS={name}"))
    seen: set[str] = set()
    for info in pm.plugin_infos():
        if info.distribution is None or info.distribution in seen or info.error:
            continue
        seen.add(info.distribution)
        wanted = _chatkernel_requirement(info.distribution)
        if wanted is not None and not _admits(wanted, __version__):
            checks.append(Check(
                f"plugin.{info.name}", "fail",
                f"{info.distribution} {info.version} needs {wanted}, but chatkernel "
                f"{__version__} is installed",
                f"pip install --upgrade {info.distribution} chatkernel"))
        else:
            checks.append(Check(f"plugin.{info.name}", "ok",
                                f"{info.distribution} {info.version} loaded"))
    return checks


def _python_check() -> Check:
    from importlib.metadata import PackageNotFoundError, metadata

    running = ".".join(map(str, sys.version_info[:3]))
    try:
        requires = metadata("chatkernel").get("Requires-Python") or ""
    except PackageNotFoundError:
        requires = ""
    if requires and not _admits(f"python{requires}", running):
        return Check("python", "fail",
                     f"Python {running} runs chatkernel {__version__}, which needs {requires}",
                     f"install chatkernel into a Python {requires} environment")
    return Check("python", "ok", f"Python {running}, chatkernel {__version__}")


def _chatkernel_requirement(distribution: str) -> str | None:
    """The requirement on chatkernel a distribution declares (``chatkernel>=0.1``)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        found = requires(distribution) or []
    except PackageNotFoundError:
        return None
    for line in found:
        if "extra ==" in line:
            continue
        name = line.split(";", 1)[0].strip()
        if name.lower().startswith("chatkernel") and \
                name[len("chatkernel"):][:1] in ("", " ", ">", "<", "=", "!", "~", "("):
            return name.replace(" ", "")
    return None


def _admits(requirement: str, version: str) -> bool:
    """Whether ``requirement`` (``name>=1.0``) admits ``version``; True when it cannot be
    told (packaging is not installed)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - packaging comes with pip's environments
        return True
    return Requirement(requirement).specifier.contains(version, prereleases=True)


# -- the config ---------------------------------------------------------------------------


def config_checks(path: Path, raw: Mapping[str, Any], error: str | None,
                  environ: Mapping[str, str] | None = None) -> list[Check]:
    """The config file: found or not (the defaults then), it parses, and every
    ``${ENV}`` it references is set. (Whether it starts, accounts included, is the
    kernel's own check: the CLI adds it.)"""
    environ = os.environ if environ is None else environ
    checks = []
    if not path.exists():
        checks.append(Check("config.file", "ok", f"no config file at {path}: the defaults "
                            "(the web chat, the echo agent)",
                            "chatkernel config init writes a starter"))
    elif error:
        checks.append(Check("config.valid", "fail", error,
                            f"edit {path} (chatkernel config validate checks it)"))
    else:
        checks.append(Check("config.valid", "ok", f"{path} validates"))
    for name, keys in sorted(unset_references(raw, environ).items()):
        checks.append(Check(
            f"config.env.{name}", "fail",
            f"${{{name}}} is not set ({', '.join(keys)} reference it)",
            f"set {name} in the gateway's environment"))
    return checks


def unset_references(raw: Mapping[str, Any], environ: Mapping[str, str]
                     ) -> dict[str, list[str]]:
    """``{variable: [dotted keys]}`` for every ``${NAME}`` in ``raw`` that ``environ``
    does not set (or sets empty)."""
    found: dict[str, list[str]] = {}

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping):
            for name, item in value.items():
                walk(item, f"{key}.{name}" if key else str(name))
        elif isinstance(value, list):
            for item in value:
                walk(item, key)
        elif isinstance(value, str):
            for match in ENV_REFERENCE.finditer(value):
                if match[1] and not environ.get(match[1]):
                    found.setdefault(match[1], []).append(key)

    walk(raw, "")
    return found


def deprecation_checks(found: Iterable[DeprecatedKey], path: Path) -> list[Check]:
    """A warning for each deprecated key the config holds (loading takes it, as its
    replacement, for now), with the command that replaces it."""
    return [Check(f"config.deprecated.{item.key}", "warn", item.message, item.fix(path))
            for item in found]


# -- the accounts and their platforms' clocks ----------------------------------------------


def account_checks(probes: Mapping[str, ProbeResult | None]) -> list[Check]:
    """One check per probed account (None: the probe could not run)."""
    checks = []
    for key, result in sorted(probes.items()):
        if result is None:
            checks.append(Check(f"account.{key}", "warn", f"{key}: not probed",
                                f"chatkernel channels probe {key}"))
        elif result.ok:
            checks.append(Check(f"account.{key}", "ok", f"{key}: {result.detail or 'ok'}"))
        else:
            fix = (f"check {key}'s credentials in the config (chatkernel channels probe "
                   f"{key} tries again)" if not result.restartable else
                   f"chatkernel channels probe {key} once the platform is reachable")
            checks.append(Check(f"account.{key}", "fail",
                                f"{key}: probe failed: {result.detail}", fix))
    return checks


def finding_checks(probes: Mapping[str, ProbeResult | None]) -> list[Check]:
    """What each account's probe found besides its own answer (``extra["findings"]``: a
    token's missing scopes, its age), one check each, ``account.<key>.<check>``."""
    checks = []
    for key, result in sorted(probes.items()):
        found = result.extra.get(FINDINGS) if result is not None else None
        for item in found if isinstance(found, list) else ():
            if not isinstance(item, Mapping) or not item.get("check"):
                continue
            status = item.get("status")
            checks.append(Check(f"account.{key}.{item['check']}",
                                status if status in ("ok", "warn", "fail") else "warn",
                                f"{key}: {item.get('message') or item['check']}",
                                str(item.get("fix") or "")))
    return checks


def clock_checks(probes: Mapping[str, ProbeResult | None], *,
                 now: float | None = None) -> list[Check]:
    """This machine's clock against each platform's, from the ``Date`` header a probe
    reported (``extra["server_date"]``, with ``extra["server_date_at"]`` the local time
    it arrived, default ``now``). One check for the worst skew."""
    worst: tuple[float, str] | None = None
    for key, result in probes.items():
        if result is None:
            continue
        date = result.extra.get(SERVER_DATE)
        parsed = email.utils.parsedate_to_datetime(date) if isinstance(date, str) else None
        if parsed is None:
            continue
        at = result.extra.get(f"{SERVER_DATE}_at") or now or time.time()
        # An HTTP date has whole seconds: half a second either way is no skew.
        skew = max(0.0, abs(float(at) - parsed.timestamp()) - 1.0)
        if worst is None or skew > worst[0]:
            worst = (skew, key)
    if worst is None:
        return [Check("clock", "ok", "clock skew not measured (no platform answer gave "
                                     "its time)")]
    skew, key = worst
    fix = "synchronise the clock: timedatectl set-ntp true (or run chrony / ntpd)"
    if skew >= SKEW_FAIL_SECONDS:
        return [Check("clock", "fail", f"this machine's clock is {skew:.0f} s off "
                      f"{key}'s platform: Slack refuses signatures past 5 minutes, and "
                      "timed work runs at the wrong time", fix)]
    if skew >= SKEW_WARN_SECONDS:
        return [Check("clock", "warn", f"this machine's clock is {skew:.0f} s off "
                      f"{key}'s platform", fix)]
    return [Check("clock", "ok", f"clock within {max(skew, 1.0):.0f} s of the platforms'")]


# -- the state store -----------------------------------------------------------------------


def sqlite_checks(path: Path) -> list[Check]:
    """The state database: its integrity (``PRAGMA integrity_check``, read-only), its
    schema version, the write-ahead log's size and the free disk beside it."""
    from chatkernel.core.store.sqlite.schema import SCHEMA_VERSION

    checks = [_disk_check(path.parent if path.parent.exists() else Path.home())]
    if not path.exists():
        checks.append(Check("store.database", "ok",
                            f"{path}: not created yet (the first start creates it)"))
        return checks
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            answer = [row[0] for row in conn.execute("PRAGMA integrity_check(20)")]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        checks.append(Check("store.integrity", "fail", f"{path}: cannot be read: {exc}",
                            f"move {path} aside (its conversations are then lost to the "
                            "gateway) or restore a backup: chatkernel restore PATH"))
        return checks
    if answer == ["ok"]:
        checks.append(Check("store.integrity", "ok", f"{path}: integrity ok"))
    else:
        checks.append(Check("store.integrity", "fail",
                            f"{path} is damaged: {'; '.join(answer[:3])}",
                            "restore a backup (chatkernel restore PATH) with the gateway "
                            "stopped"))
    if version > SCHEMA_VERSION:
        checks.append(Check("store.schema", "fail",
                            f"{path} has schema version {version}; this chatkernel knows up "
                            f"to {SCHEMA_VERSION} (a newer one wrote it)",
                            "pip install --upgrade chatkernel"))
    else:
        later = " (the next start migrates it)" if version < SCHEMA_VERSION else ""
        checks.append(Check("store.schema", "ok", f"schema version {version}{later}"))
    wal = Path(f"{path}-wal")
    size = wal.stat().st_size if wal.exists() else 0
    if size > WAL_WARN_BYTES:
        checks.append(Check("store.wal", "warn",
                            f"{wal} is {size / 1024 ** 2:.0f} MB: checkpoints are not keeping "
                            "up (a long-lived reader?)",
                            "chatkernel doctor --fix checkpoints it (with the gateway "
                            "stopped)"))
    else:
        checks.append(Check("store.wal", "ok", f"write-ahead log {size / 1024 ** 2:.1f} MB"))
    return checks


def _disk_check(directory: Path) -> Check:
    try:
        free = shutil.disk_usage(directory).free
    except OSError as exc:
        return Check("store.disk", "warn", f"cannot tell the free space of {directory}: {exc}")
    shown = f"{free / 1024 ** 3:.1f} GB free on {directory}'s file system"
    fix = f"free space on {directory}'s file system, or set store.path elsewhere"
    if free < DISK_FAIL_BYTES:
        return Check("store.disk", "fail", f"only {shown}: commits fail on a full disk", fix)
    if free < DISK_WARN_BYTES:
        return Check("store.disk", "warn", f"only {shown}", fix)
    return Check("store.disk", "ok", shown)


def checkpoint_wal(path: Path) -> str | None:
    """Fold the write-ahead log into the database and truncate it (``PRAGMA
    wal_checkpoint(TRUNCATE)``); what was done, or None when there is no log to fold.
    Only with no gateway on the file: the caller checks."""
    wal = Path(f"{path}-wal")
    if not path.exists() or not wal.exists() or wal.stat().st_size == 0:
        return None
    before = wal.stat().st_size
    conn = sqlite3.connect(path, timeout=5.0)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    if busy:
        return f"{wal}: checkpoint blocked by a reader; try again once it is done"
    return f"{wal}: checkpointed and truncated ({before / 1024 ** 2:.1f} MB -> 0)"


async def redis_checks(url: str, prefix: str) -> list[Check]:
    """The Redis server: reachable, its version (7 or newer), and the persistence
    docs/scale-out.md asks for (the append-only file)."""
    try:
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError
    except ImportError:
        return [Check("store.redis", "fail", "store.backend = \"redis\" but the redis client "
                      "is not installed", "pip install 'chatkernel[redis]'")]
    safe = _safe_url(url)
    client = aioredis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
    checks = []
    try:
        try:
            info = await client.info("server")
        except (RedisError, OSError) as exc:
            return [Check("store.redis", "fail", f"cannot reach Redis at {safe}: {exc}",
                          "start the Redis server, or correct store.url")]
        version = str(info.get("redis_version", "?"))
        major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
        if major < REDIS_MAJOR:
            checks.append(Check("store.redis", "fail",
                                f"Redis {version} at {safe}: chatkernel needs 7 or newer",
                                "upgrade the Redis server"))
        else:
            keys = await client.dbsize()
            checks.append(Check("store.redis", "ok", f"Redis {version} at {safe} ({keys} "
                                f"keys; this gateway's start with {prefix!r})"))
        checks.append(await _persistence(client, RedisError))
    finally:
        await client.aclose()
    return checks


async def _persistence(client: Any, error: type[Exception]) -> Check:
    fix = "set appendonly yes and appendfsync everysec (or always) in redis.conf"
    try:
        config = await client.config_get("append*")
    except error:  # CONFIG may be renamed away on a managed server
        info = await client.info("persistence")
        config = {"appendonly": "yes" if info.get("aof_enabled") else "no"}
    if str(config.get("appendonly")) != "yes":
        return Check("store.redis.persistence", "warn",
                     "Redis runs without the append-only file: a crash of Redis loses the "
                     "writes since its last snapshot (docs/scale-out.md)", fix)
    fsync = str(config.get("appendfsync", "everysec"))
    if fsync == "no":
        return Check("store.redis.persistence", "warn",
                     "appendfsync no: a power loss can lose many seconds of writes", fix)
    return Check("store.redis.persistence", "ok", f"append-only file, appendfsync {fsync}")


def _safe_url(url: str) -> str:
    """``url`` without its password."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


# -- the listen address ------------------------------------------------------------------


def listen_check(listen: str, gateway: GatewayInfo | None) -> Check:
    """The listen address is free, or held by this home's running gateway."""
    from chatkernel.core.config.listen import parse_listen

    host, port = parse_listen(listen)
    if port == 0:
        return Check("listen", "ok", f"{listen}: the system picks a free port")
    if gateway is not None and gateway.url.rstrip("/").endswith(f":{port}"):
        return Check("listen", "ok", f"{listen}: held by this home's gateway (pid "
                                     f"{gateway.pid})")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        return Check("listen", "fail",
                     f"{listen}: cannot be bound ({os.strerror(exc.errno) if exc.errno else exc})"
                     ": another program holds it", "stop that program, or set "
                     "gateway.listen to a free address (chatkernel config set gateway.listen "
                     "127.0.0.1:PORT)")
    return Check("listen", "ok", f"{listen} is free")


# -- the webhooks' public URLs ------------------------------------------------------------


def mark_answers(app: web.Application) -> str:
    """Put :data:`GATEWAY_HEADER` on every answer of the gateway's ``app``: a mark made
    at random for this process, which it returns."""
    mark = secrets.token_hex(8)

    async def marked(request: web.Request, response: web.StreamResponse) -> None:
        response.headers[GATEWAY_HEADER] = mark

    app.on_response_prepare.append(marked)
    return mark


@dataclass(frozen=True, slots=True)
class PublicURL:
    """A webhook account's public URL, where its platform posts, and the config key
    that sets it ("" when the channel makes it up)."""

    account: str
    url: str
    key: str = ""


def webhook_url_checks(urls: Iterable[PublicURL], gateway: GatewayInfo | None, *,
                       timeout: float) -> list[Check]:
    """Each webhook account's public URL requested from this machine (a GET; the
    platform POSTs, but any answer of the gateway carries its mark): ok when this home's
    running gateway answered it, as its own address shows (:data:`GATEWAY_HEADER`); a
    failure when something else answers (a proxy pointing elsewhere) or nothing does.
    With no gateway running it cannot be told: a warning."""
    urls = sorted(urls, key=lambda item: item.account)
    if not urls:
        return []
    if gateway is None:
        return [Check(f"webhook.{item.account}.url", "warn",
                      f"{item.account}: no gateway runs, so whether {item.url} reaches it "
                      "cannot be told", "start the gateway (chatkernel run), then run "
                                        "chatkernel doctor again") for item in urls]
    try:
        own = _answer_of(f"{gateway.url.rstrip('/')}/healthz", timeout)[0]
    except NO_ANSWER as exc:
        own, why = None, _reason(exc)
    else:
        why = "it answered without its mark"
    if own is None:
        return [Check(f"webhook.{item.account}.url", "warn",
                      f"{item.account}: cannot tell whether {item.url} reaches the gateway: "
                      f"the gateway at {gateway.url} did not answer ({why})",
                      "chatkernel health --verbose") for item in urls]
    checks = []
    for item in urls:
        where = f" (or correct {item.key})" if item.key else ""
        check = f"webhook.{item.account}.url"
        try:
            mark, status, server = _answer_of(item.url, timeout)
        except NO_ANSWER as exc:
            checks.append(Check(
                check, "fail", f"{item.account}: {item.url}: cannot connect: {_reason(exc)}",
                f"make {item.url} reach this gateway at {gateway.url} (its DNS name, the "
                f"reverse proxy or tunnel in front of it, the firewall){where}: the platform "
                "posts there"))
            continue
        if mark == own:
            checks.append(Check(check, "ok", f"{item.account}: {item.url} reaches this "
                                             "gateway"))
            continue
        who = (f"another chatkernel gateway (not the one at {gateway.url})" if mark else
               f"HTTP {status}" + (f" from {server}" if server else ""))
        checks.append(Check(
            check, "fail", f"{item.account}: {item.url} answers, but not from this gateway "
                           f"(a proxy pointing elsewhere?): {who}",
            f"point the reverse proxy or tunnel for {item.url} at this gateway's address, "
            f"{gateway.url}{where}"))
    return checks


#: What a request that got no HTTP answer raises: no connection, a timeout, a TLS
#: failure (OSError), a URL urllib cannot request (ValueError), something that is not
#: HTTP on the other end (HTTPException).
NO_ANSWER = (OSError, ValueError, http.client.HTTPException)


def _answer_of(url: str, timeout: float) -> tuple[str | None, int, str]:
    """``(the gateway's mark or None, the status, the Server header)`` of a GET of
    ``url``, whatever its status; one of :data:`NO_ANSWER` when no answer came."""
    request = urllib.request.Request(url, headers={"User-Agent": "chatkernel-doctor"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            headers, status = response.headers, response.status
    except urllib.error.HTTPError as exc:  # an answer all the same
        headers, status = exc.headers, exc.code
        exc.close()
    return headers.get(GATEWAY_HEADER), status, headers.get("Server") or ""


def _reason(exc: Exception) -> str:
    """Why a request got no answer, in the words of the error that says it."""
    reason = getattr(exc, "reason", None) or exc
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason).strip() or type(reason).__name__


# -- the security audit ----------------------------------------------------------------------


def audit_checks(findings: Iterable[Finding]) -> list[Check]:
    """The audit's critical findings, a failed check each (the rest: ``security audit``)."""
    from chatkernel.core.health.audit import critical

    found = critical(findings)
    if not found:
        return [Check("security", "ok", "no critical finding (chatkernel security audit "
                                        "shows the rest)")]
    return [Check(f"security.{finding.check}", "fail", finding.message, finding.fix)
            for finding in found]
