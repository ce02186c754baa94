"""The security audit: what in a config and its home exposes the gateway, or the agent
behind it, to people it should not (``chatkernel security audit``, docs/security-audit.md).

:func:`audit` reads the config file as written (raw) and parsed, and the files of the
home; it opens no connection and changes nothing. Each :class:`Finding` has a stable
check id, a severity, what is wrong (naming the file, key or account, never a secret's
value) and how to fix it. :func:`fix_modes` applies the one kind of fix that is always
safe: tightening the mode of the files the findings name.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from chatkernel.core.config.env import (
    ENV_REFERENCE,
    env_name_for,
    holds_env_reference,
    is_secret_field,
    resolve_env,
)
from chatkernel.core.config.schema import DEFAULT_AGENT, effective_accounts, listens_locally

if TYPE_CHECKING:
    from chatkernel.core.config.schema import AgentConfig, KernelConfig
    from chatkernel.core.plugins import PluginManager
    from chatkernel.sdk.accounts import AccountConfig
    from chatkernel.sdk.channel import Channel

Severity = Literal["critical", "warn", "info"]
#: Most severe first: the order findings are reported in.
SEVERITIES: tuple[Severity, ...] = ("critical", "warn", "info")
#: The mode :func:`fix_modes` gives a file, and the home.
FILE_MODE, HOME_MODE = 0o600, 0o700
#: The variable the control token comes from (chatkernel.core.gateway.secret_env).
CONTROL_TOKEN_VARIABLE = "CHATKERNEL_CONTROL_TOKEN"
#: The env file of the home, where an operator keeps the variables the config references.
ENV_FILE = ".env"
#: The running gateway's pid, URL and control token (chatkernel.core.gateway_state).
GATEWAY_FILE = "gateway.json"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem the audit found.

    ``path`` and ``mode``: the file whose mode is the problem and the mode that fixes
    it (:func:`fix_modes`); None for the rest."""

    check: str
    severity: Severity
    message: str
    fix: str
    path: Path | None = None
    mode: int | None = None

    def as_dict(self) -> dict[str, str]:
        """What ``--json`` shows of it."""
        return {"check": self.check, "severity": self.severity, "message": self.message,
                "fix": self.fix}


@dataclass(frozen=True, slots=True)
class ModeChange:
    """A file whose mode :func:`fix_modes` changed."""

    path: Path
    old: int
    new: int

    def __str__(self) -> str:
        return f"{self.path}: mode {self.old:04o} -> {self.new:04o}"


def critical(findings: Iterable[Finding]) -> list[Finding]:
    """The critical findings (``security audit`` exits 1 when there is one)."""
    return [finding for finding in findings if finding.severity == "critical"]


def audit(config_path: Path, home: Path, raw_config: Mapping[str, Any],
          config: KernelConfig | None, *, pm: PluginManager | None = None,
          environ: Mapping[str, str] | None = None) -> list[Finding]:
    """Every finding for the config at ``config_path`` (``raw_config`` as written,
    ``config`` parsed, None when it does not parse: then only what the raw table and
    the files show is checked) and the home ``home``, most severe first.

    ``pm``: the plugin manager whose channels and implied accounts count (default the
    process's); ``environ``: what ``${ENV}`` references resolve to (default the process's).
    """
    from chatkernel.core.plugins import collect_channels, get_plugin_manager

    pm = pm if pm is not None else get_plugin_manager()
    channels = collect_channels(pm)
    literals = literal_secrets(raw_config, channels)
    findings = [*_secret_literal(literals)]
    findings += _file_modes(config_path, home, config, holds_secrets=bool(literals))
    if config is not None:
        accounts = _accounts(config, channels, pm, environ)
        findings += _listen(config, accounts)
        findings += _admission(config, accounts)
        findings += _webhooks(accounts)
        findings += _command_agents(config, raw_config, channels)
    return sorted(findings, key=lambda finding: SEVERITIES.index(finding.severity))


def fix_modes(findings: Iterable[Finding]) -> list[ModeChange]:
    """Tighten the mode of each file and directory the findings name (``chmod 600`` a
    file, ``700`` the home), and nothing else; what changed."""
    changed = []
    for finding in findings:
        if finding.path is None or finding.mode is None:
            continue
        try:
            old = stat.S_IMODE(finding.path.stat().st_mode)
            if old != finding.mode:
                os.chmod(finding.path, finding.mode)
                changed.append(ModeChange(finding.path, old, finding.mode))
        except FileNotFoundError:  # gone since the audit: nothing left to tighten
            continue
    return changed


# -- secrets written into the config ----------------------------------------------------


def secret_entries(raw: Mapping[str, Any],
                   channels: Mapping[str, type[Channel]] | None = None
                   ) -> list[tuple[str, Any]]:
    """``(dotted key, value)`` for every secret of ``raw`` (a config as written), as a
    value or a reference: secret by its name (``bot_token``), or a field its channel's
    account model keeps out of reprs."""
    found: list[tuple[str, Any]] = []

    def walk(value: Any, path: list[str]) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, [*path, str(key)])
            return
        field = None
        if len(path) == 5 and path[0] == "channels" and path[2] == "accounts" and channels:
            channel = channels.get(path[1])
            field = channel.account_model.model_fields.get(path[4]) if channel else None
        if path and is_secret_field(path[-1], field):
            found.append((".".join(path), value))

    walk(raw, [])
    return found


def _literals(value: Any) -> list[str]:
    """The strings of a secret's value written in plain text (not ``${ENV}``)."""
    return [item for item in (value if isinstance(value, list) else [value])
            if isinstance(item, str) and item and not holds_env_reference(item)]


def literal_secrets(raw: Mapping[str, Any],
                    channels: Mapping[str, type[Channel]] | None = None) -> list[str]:
    """The dotted keys of ``raw`` holding a secret in plain text rather than as a
    ``${ENV}`` reference."""
    return [key for key, value in secret_entries(raw, channels) if _literals(value)]


def _secret_literal(keys: list[str]) -> list[Finding]:
    findings = []
    for key in keys:
        parts = key.split(".")
        if len(parts) >= 3 and parts[-2] == "env" and parts[0] in ("agent", "agents"):
            # An agent's own variable: pass it from the gateway's environment instead.
            table = ".".join(parts[:-2])
            fix = (f"set {parts[-1]} in the gateway's environment, remove {key} and add "
                   f"\"{parts[-1]}\" to {table}.pass_env")
        else:
            name = env_name_for(key)
            fix = (f"set {name} in the gateway's environment and write "
                   f"{key} = \"${{{name}}}\" (chatkernel config set {key} '${{{name}}}')")
        findings.append(Finding(
            "secret-literal", "warn",
            f"{key} holds a secret in plain text: whoever reads the config file or a copy "
            "of it (a backup, a paste) has it", fix))
    return findings


# -- file modes ----------------------------------------------------------------------------


def _file_modes(config_path: Path, home: Path, config: KernelConfig | None, *,
                holds_secrets: bool) -> list[Finding]:
    """config.toml, the state database, gateway.json and the home's .env readable or
    writable by others than their owner; the home writable by them."""
    files: list[tuple[Path, str, bool]] = [
        (config_path, "the config file" + (", which holds secrets" if holds_secrets else ""),
         holds_secrets),
        (home / GATEWAY_FILE, "the running gateway's control token file", True),
        (home / ENV_FILE, "the env file", True),
    ]
    if config is None or config.store.backend == "sqlite":  # unread: the default place
        database = config.store_path() if config is not None else home / "state.db"
        files += [(Path(f"{database}{suffix}"), "the state database: every conversation",
                   False) for suffix in ("", "-wal", "-shm")]
    findings = []
    for path, what, secret in files:
        mode = _mode(path)
        if mode is None or not mode & 0o077:
            continue
        readable, writable = bool(mode & 0o044), bool(mode & 0o022)
        access = " and ".join(word for word, on in (("readable", readable),
                                                    ("writable", writable)) if on)
        if not access:  # only executable by them: nothing to read or change
            continue
        severity: Severity = "critical" if writable or (secret and readable) else "warn"
        findings.append(Finding(
            "file-mode", severity,
            f"{path} ({what}) is {access} by {_whom(mode)} (mode {mode:04o})",
            f"chmod 600 {path} (chatkernel security audit --fix does it)",
            path, FILE_MODE))
    mode = _mode(home)
    if mode is not None and mode & 0o022:
        findings.append(Finding(
            "home-mode", "critical",
            f"the home {home} is writable by {_whom(mode & 0o022)} (mode {mode:04o}): they "
            "can replace the config file, and with it what the agent runs",
            f"chmod 700 {home} (chatkernel security audit --fix does it)",
            home, HOME_MODE))
    return findings


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None


def _whom(mode: int) -> str:
    return " and ".join(who for who, bits in (("its group", 0o070), ("others", 0o007))
                        if mode & bits)


# -- accounts ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Account:
    channel: str
    name: str
    settings: AccountConfig
    #: Its platform is the gateway's own page (the channel's ``needs_http_server``):
    #: whoever reaches the listen address reaches it.
    on_gateway_page: bool

    @property
    def key(self) -> str:
        return f"channels.{self.channel}.accounts.{self.name}"


def _accounts(config: KernelConfig, channels: Mapping[str, type[Channel]],
              pm: PluginManager, environ: Mapping[str, str] | None) -> list[_Account]:
    """The enabled accounts the gateway would run (implied ones included), of installed
    channels, each with its settings as its channel's model reads them; an account that
    does not validate is read as written, so that what it lacks is still found."""
    from pydantic import ValidationError

    found = []
    for channel, name, enabled, raw in effective_accounts(config, pm):
        channel_type = channels.get(channel)
        if not enabled or channel_type is None:
            continue
        model = channel_type.account_model
        data = resolve_env(dict(raw), strict=False,
                           environ=dict(environ) if environ is not None else None)
        try:
            settings = model.model_validate(data)
        except ValidationError:
            settings = model.model_construct(**{key: value for key, value in data.items()
                                                if key in model.model_fields})
        found.append(_Account(channel, name, settings,
                              bool(getattr(channel_type, "needs_http_server", False))))
    return found


def admits_everyone(settings: AccountConfig) -> list[str]:
    """Why an account lets anyone talk to its agent (empty: it does not)."""
    reasons = []
    if "*" in [str(sender) for sender in getattr(settings, "allow_from", None) or ()]:
        reasons.append('allow_from has "*"')
    if getattr(settings, "dm_policy", None) == "open":
        reasons.append('dm_policy = "open"')
    if getattr(settings, "group_policy", None) == "open" and \
            not getattr(settings, "group_allow_from", None):
        reasons.append('group_policy = "open"')
    return reasons


def answering_agents(config: KernelConfig, channel: str, account: str) -> list[str]:
    """The agents that may answer some chat of an account: those of the bindings that
    can match it, and the default agent unless bindings catch every chat of it first."""
    rules = [rule for rule in config.bindings
             if rule.channel in (None, channel) and rule.account in (None, account)]
    names = {rule.agent for rule in rules}
    wide = {rule.chat_type for rule in rules if rule.chat is None and rule.thread is None}
    if None not in wide and not {"direct", "group"} <= wide:
        names.add(DEFAULT_AGENT)
    agents = config.named_agents()
    return sorted(name for name in names if name in agents)


def runs_commands(agent: AgentConfig, settings: AccountConfig) -> str | None:
    """Why an agent answering an account can act on this machine (None: it cannot)."""
    if agent.kind == "command":
        return "a command agent"
    if (agent.access_level or getattr(settings, "access_level", None)) == "full":
        return "an agent with access level full"
    return None


def _listen(config: KernelConfig, accounts: list[_Account]) -> list[Finding]:
    if listens_locally(config):
        return []
    listen = config.gateway.listen
    findings = []
    if not config.gateway.control_token:
        findings.append(Finding(
            "listen-public-no-token", "critical",
            f"gateway.listen = \"{listen}\" reaches beyond this machine and "
            "gateway.control_token is not set: the control API would have no fixed token "
            "(the gateway refuses to start so)",
            f"set {CONTROL_TOKEN_VARIABLE} to a long random secret and write "
            f"gateway.control_token = \"${{{CONTROL_TOKEN_VARIABLE}}}\", or listen on "
            "127.0.0.1"))
    for account in accounts:
        reasons = admits_everyone(account.settings) if account.on_gateway_page else []
        if reasons:
            findings.append(Finding(
                "listen-public-page-open", "critical",
                f"{account.key} is served on the gateway's own page and admits everyone "
                f"({', '.join(reasons)}), and gateway.listen = \"{listen}\" reaches beyond "
                "this machine: anyone who finds the address talks to the agent",
                f"list who may talk in {account.key}.allow_from, or listen on 127.0.0.1 "
                "behind a proxy that authenticates"))
    return findings


def _admission(config: KernelConfig, accounts: list[_Account]) -> list[Finding]:
    """``"*"`` and the open policies: critical where an agent that can run commands
    answers, a warning elsewhere; on the gateway's own page, fine on loopback (an info)
    and for :func:`_listen` beyond it."""
    agents = config.named_agents()
    findings = []
    for account in accounts:
        reasons = admits_everyone(account.settings)
        if not reasons:
            continue
        why = ", ".join(reasons)
        if account.on_gateway_page:
            if listens_locally(config):
                findings.append(Finding(
                    "allow-everyone", "info",
                    f"{account.key} admits everyone who reaches the page ({why}); the "
                    f"gateway listens on {config.gateway.listen} (this machine only)",
                    f"keep gateway.listen on loopback, or list who may talk in "
                    f"{account.key}.allow_from before listening beyond it"))
            continue
        powers = {name: power for name in answering_agents(config, account.channel,
                                                            account.name)
                  if (power := runs_commands(agents[name], account.settings))}
        fix = (f"list the senders in {account.key}.allow_from instead of \"*\" (each "
               f"gets their id from /whoami), and set {account.key}.dm_policy = "
               "\"pairing\" or \"allowlist\" and group_policy = \"allowlist\"")
        if powers:
            agent, power = next(iter(powers.items()))
            findings.append(Finding(
                "allow-everyone", "critical",
                f"{account.key} admits everyone ({why}) and its chats are answered by "
                f"agent {agent!r}, {power}: any stranger who finds the bot can act on "
                "this machine", fix))
        else:
            findings.append(Finding(
                "allow-everyone", "warn",
                f"{account.key} admits everyone ({why}): any stranger who finds the bot "
                "talks to the agent (and spends what it costs)", fix))
    return findings


def _webhooks(accounts: list[_Account]) -> list[Finding]:
    findings = []
    for account in accounts:
        missing = [key for key in account.settings.webhook_secrets()
                   if not getattr(account.settings, key, None)]
        for key in missing:
            name = env_name_for(f"{account.key}.{key}")
            findings.append(Finding(
                "webhook-unsigned", "critical",
                f"{account.key} receives webhooks without {key}: its requests cannot be "
                "authenticated, so anyone who finds the URL can post messages as any user",
                f"set {name} to the platform's value and write {account.key}.{key} = "
                f"\"${{{name}}}\""))
    return findings


# -- the command agent's environment ----------------------------------------------------


def _references(value: Any) -> set[str]:
    """The variables the ``${NAME}`` references in a value name."""
    return {match[1] for item in (value if isinstance(value, list) else [value])
            if isinstance(item, str) for match in ENV_REFERENCE.finditer(item) if match[1]}


def _command_agents(config: KernelConfig, raw: Mapping[str, Any],
                    channels: Mapping[str, type[Channel]]) -> list[Finding]:
    """A command agent given the gateway's own secrets: ``pass_env`` naming, or an
    ``env`` value referencing, a variable one of them comes from (the control token's,
    a channel token's: ``${TELEGRAM_BOT_TOKEN}``, ``store.url``'s), or an ``env`` value
    that is a copy of one written in the config."""
    own = {key: value for key, value in raw.items() if key not in ("agent", "agents")}
    entries = secret_entries(own, channels)
    variables = {CONTROL_TOKEN_VARIABLE}.union(*(_references(value) for _, value in entries))
    store = own.get("store")
    if isinstance(store, Mapping):
        variables |= _references(store.get("url"))
    copies = {item for _, value in entries for item in _literals(value)}
    findings = []
    for name, agent in config.named_agents().items():
        if agent.kind != "command":
            continue
        where = config.agent_key(name, "env").rpartition(".")[0]  # agent, agents.<name>
        table: Any = raw
        for part in (*where.split("."), "env"):
            table = table.get(part) if isinstance(table, Mapping) else None
        env = table if isinstance(table, Mapping) else {}
        given = [f"pass_env passes {variable}" for variable in agent.pass_env
                 if variable in variables]
        given += [f"env.{key} references ${{{variable}}}" for key, value in env.items()
                  for variable in sorted(_references(value) & variables)]
        given += [f"env.{key} is a copy of a secret of the config" for key, value in env.items()
                  if set(_literals(value)) & copies]
        if given:
            findings.append(Finding(
                "command-agent-env", "critical",
                f"agent {name!r} (a command agent) is given the gateway's own secrets "
                f"({'; '.join(given)}): its program, and whoever steers it through a chat, "
                "can read them and act as the gateway",
                f"remove them from {where}.pass_env and {where}.env; give the program "
                "credentials of its own"))
    return findings
