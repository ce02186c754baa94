"""``${ENV}`` references and secrets: resolving references, telling a secret by its
key, redacting what is shown, and collecting the secrets a running kernel must keep
out of logs and agent output."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatkernel.sdk.errors import ConfigError

if TYPE_CHECKING:
    from chatkernel.core.config.schema import KernelConfig

ENV_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class EnvNotSet(ConfigError):
    """``${NAME}`` references to variables that are not set: ``missing`` holds each
    one's ``(key, NAME)``, in the file's order."""

    def __init__(self, missing: list[tuple[str, str]], *, path: Path | None = None,
                 where: str = "", hint: str = "") -> None:
        self.missing = missing
        self.problems = [(key or None, _not_set(name, where)) for key, name in missing]
        if len(missing) == 1:
            message = self.problems[0][1] + (f": {hint}" if hint else "")
            super().__init__(message, path=path, key=missing[0][0] or None)
        else:
            lines = "\n".join(f"  {key}: {message}" for key, message in self.problems)
            message = f"{len(missing)} problems:\n{lines}" + (f"\n{hint}" if hint else "")
            super().__init__(message, path=path)


def _not_set(name: str, where: str) -> str:
    return f"environment variable {name} is not set{where} (referenced as ${{{name}}})"


def must_resolve(key: str, strict: bool | Collection[str]) -> bool:
    """Whether a reference at ``key`` must resolve: ``strict`` is True (all must),
    False (none), or the dotted keys whose references must, each covering the keys
    under it (``*`` for any one part: ``agents.*.workspace``)."""
    if isinstance(strict, bool):
        return strict
    parts = re.sub(r"\[\d+\]", "", key).split(".")
    return any(len(pattern.split(".")) <= len(parts) and all(
        fnmatch.fnmatchcase(part, wanted) for part, wanted in zip(parts, pattern.split(".")))
        for pattern in strict)


def resolve_env(value: Any, *, key: str = "", path: Path | None = None,
                environ: Mapping[str, str] | None = None,
                strict: bool | Collection[str] = True) -> Any:
    """Replace ``${NAME}`` with the environment's value, recursively.

    ``$$`` is a literal ``$``. A reference to a variable that is not set is left as
    written, and an error (:class:`EnvNotSet`, naming every such one) where it must
    resolve (:func:`must_resolve`: everywhere when ``strict`` is True).
    """
    env = os.environ if environ is None else environ
    missing: list[tuple[str, str]] = []

    def walk(value: Any, key: str) -> Any:
        if isinstance(value, str):
            if "$" not in value:
                return value

            def substitute(match: re.Match[str]) -> str:
                name = match[1]
                if name is None:
                    return "$"
                if name in env:
                    return env[name]
                if must_resolve(key, strict):
                    missing.append((key, name))
                return match[0]

            return ENV_REFERENCE.sub(substitute, value)
        if isinstance(value, dict):
            return {k: walk(v, f"{key}.{k}" if key else k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{key}[{i}]") for i, v in enumerate(value)]
        return value

    resolved = walk(value, key)
    if missing:
        raise EnvNotSet(missing, path=path)
    return resolved


# -- secrets -------------------------------------------------------------------------

_SECRET_KEY = re.compile(r"(token|secret|password|passwd|api_key|apikey|private_key|aes_key)",
                         re.IGNORECASE)
REDACTED = "***"


def is_secret_key(key: str) -> bool:
    """Whether a key's value is a secret, by its name (``bot_token``, ``app_secret``...)."""
    return bool(_SECRET_KEY.search(key)) and not key.endswith("_env")


def redact(value: Any, key: str = "") -> Any:
    """A copy with secret values replaced; ``${ENV}`` references are kept, they hide nothing."""
    if isinstance(value, dict):
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if is_secret_key(key) and isinstance(value, str) and value \
            and not ENV_REFERENCE.fullmatch(value):
        return REDACTED
    return value


def env_values(value: Any, environ: dict[str, str] | None = None) -> list[str]:
    """Every value a ``${NAME}`` reference in ``value`` (raw config) resolves to.

    Whatever comes from the environment is treated as a secret when a
    diagnosis is printed, whatever its key is called.
    """
    env = os.environ if environ is None else environ
    if isinstance(value, str):
        return [env[m[1]] for m in ENV_REFERENCE.finditer(value) if m[1] and env.get(m[1])]
    if isinstance(value, dict):
        return [s for v in value.values() for s in env_values(v, environ)]
    if isinstance(value, list):
        return [s for v in value for s in env_values(v, environ)]
    return []


def secret_values(value: Any, key: str = "") -> list[str]:
    """Every secret string in a (resolved) config, for the log redactor."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in secret_values(v, k)]
    if isinstance(value, list):
        return [s for v in value for s in secret_values(v, key)]
    return [value] if is_secret_key(key) and isinstance(value, str) and value else []


def kernel_secrets(config: KernelConfig, environ: dict[str, str] | None = None) -> list[str]:
    """The secrets a running kernel knows, to keep them out of what agents send and log:
    every secret-named value of the (resolved) config, as the log redactor learns them,
    every agent's API key, and every secret-named variable of the gateway's environment
    (``TELEGRAM_BOT_TOKEN``: a token a ``${ENV}`` reference or an agent may carry)."""
    env = os.environ if environ is None else environ
    found = secret_values(config.model_dump(mode="json"))
    names = sorted({agent.api_key_env for agent in (config.agent, *config.agents.values())
                    if agent.api_key_env})
    names += [name for name in env if is_secret_key(name)]
    found += [env[name] for name in names if env.get(name)]
    return found


def is_secret_field(key: str, field: Any = None) -> bool:
    """Whether a key holds a secret: its name says so (``bot_token``), or its model
    field is kept out of reprs (``Field(repr=False)``: how a channel marks one)."""
    return is_secret_key(key.rsplit(".", 1)[-1]) or (field is not None and
                                                      field.repr is False)


def env_name_for(key: str) -> str:
    """A variable name to hold a key's secret: ``TELEGRAM_BOT_TOKEN`` for
    ``channels.telegram.accounts.main.bot_token`` (the account's name is kept unless it
    is ``main`` or ``default``), ``CHATKERNEL_CONTROL_TOKEN`` for ``gateway.control_token``."""
    parts = key.split(".")
    if parts[0] == "channels" and len(parts) == 5 and parts[2] == "accounts":
        parts = [parts[1]] + ([] if parts[3] in ("main", "default") else [parts[3]]) \
            + [parts[4]]
    else:
        parts = ["chatkernel", parts[-1]]
    return re.sub(r"[^A-Za-z0-9_]", "_", "_".join(parts)).upper()


def holds_env_reference(value: Any) -> bool:
    """Whether a (raw) value is or contains a ``${NAME}`` reference."""
    return isinstance(value, str) and any(m[1] for m in ENV_REFERENCE.finditer(value))
