"""Secrets out of the gateway's environment block, and its memory closed to other processes.

A process's environment as it was started stays readable in ``/proc/<pid>/environ``
for its whole life, whatever it does to ``os.environ`` later; so does its memory,
to every process of the same user. The command agent runs as that user. So
``chatkernel run``:

1. reads its config and picks the variables of its environment that are secrets
   (:func:`secret_names`): every one a ``${NAME}`` reference of the config names,
   the control token, ``agent.api_key_env``, and every name shaped like a secret
   (``*_TOKEN``, ``*_KEY``, ``*_SECRET``, ``*PASSWORD*``...);
2. puts their values in an anonymous file (a memfd on Linux; an unlinked
   temporary file elsewhere) and executes itself again, same pid and arguments,
   with an environment without them and the file's descriptor named in
   ``CHATKERNEL_SECRETS_FD`` (:func:`exec_without_secrets`);
3. in the new image, reads the values back into ``os.environ`` and closes the file
   (:func:`take_over`): the config resolves, ``agent.pass_env`` passes, reloads read
   them as before, and ``/proc/<pid>/environ`` holds none of them, even for root;
   only then is ``$CHATKERNEL_HOME/.env`` read (:mod:`chatkernel.core.config.envfile`),
   into ``os.environ`` alone: its values never enter an environment block;
4. makes itself non-dumpable (:func:`make_non_dumpable`, ``prctl(PR_SET_DUMPABLE,
   0)`` on Linux): no process of the same user may read its ``/proc`` files
   (environ, mem, fd) or attach a debugger, and it leaves no core dump.

What is left is the operator's: root can still read the gateway's memory; an agent
that must not, runs as another user or in a sandbox (docs/gateway.md, "Security").
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from chatkernel.core.config import is_secret_key

__all__ = ["HANDOVER_VARIABLE", "exec_without_secrets", "is_secret_name", "make_non_dumpable",
           "secret_names", "take_over"]

log = logging.getLogger("chatkernel.gateway")

#: Names the descriptor the secrets are handed over on, in the re-executed gateway.
HANDOVER_VARIABLE = "CHATKERNEL_SECRETS_FD"
CONTROL_TOKEN_VARIABLE = "CHATKERNEL_CONTROL_TOKEN"
#: Never moved, whatever their names look like: what programs need to run.
KEPT = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ",
                  "TMPDIR", "PWD", "TERM", "CHATKERNEL_HOME", "CHATKERNEL_CONFIG",
                  "PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT", "COMSPEC", "PATHEXT"})
#: Besides what :func:`~chatkernel.core.config.is_secret_key` calls a secret.
_SECRET_NAME = re.compile(r"(_TOKEN|_KEY|_SECRET|_PASS|_PASSPHRASE)$|PASSWORD|PASSWD",
                          re.IGNORECASE)
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

PR_SET_DUMPABLE = 4


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    return name not in KEPT and (bool(_SECRET_NAME.search(name)) or is_secret_key(name))


def referenced_names(raw: Any) -> set[str]:
    """Every ``NAME`` a ``${NAME}`` reference in the raw config names."""
    if isinstance(raw, str):
        return set(_ENV_REFERENCE.findall(raw))
    if isinstance(raw, dict):
        return {name for value in raw.values() for name in referenced_names(value)}
    if isinstance(raw, list):
        return {name for value in raw for name in referenced_names(value)}
    return set()


def secret_names(raw: Mapping[str, Any], environ: Mapping[str, str]) -> list[str]:
    """The variables of ``environ`` to keep out of the environment block, for the raw
    config ``raw`` (see the module)."""
    named = referenced_names(raw) | {CONTROL_TOKEN_VARIABLE}
    agent = raw.get("agent") if isinstance(raw.get("agent"), dict) else {}
    key_env = agent.get("api_key_env", "OPENAI_API_KEY")
    if isinstance(key_env, str) and key_env:
        named.add(key_env)
    return sorted(name for name in environ if name != HANDOVER_VARIABLE and
                  ((name in named and name not in KEPT) or is_secret_name(name)))


def _handover_file(values: Mapping[str, str]) -> int:
    """An anonymous file holding ``values`` (JSON), its offset at 0; its descriptor,
    inheritable."""
    data = json.dumps(dict(values)).encode()
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("chatkernel-secrets", 0)  # no MFD_CLOEXEC: the new image reads it
    else:
        with tempfile.TemporaryFile() as unnamed:  # unlinked at once on POSIX
            fd = os.dup(unnamed.fileno())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        os.set_inheritable(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def can_reexec() -> bool:
    """Whether this process can execute itself again in place (POSIX, a known interpreter)."""
    return os.name == "posix" and bool(sys.executable) and bool(getattr(sys, "orig_argv", None))


def exec_without_secrets(names: Iterable[str]) -> None:
    """Execute this program again, same pid and arguments, without ``names`` in its
    environment; their values follow on an inherited descriptor. Returns only when
    there is nothing to move or this system cannot (then the environment stays)."""
    names = [name for name in names if name in os.environ]
    if not names or not can_reexec():
        return
    moved = {name: os.environ[name] for name in names}
    fd = _handover_file(moved)
    clean = {name: value for name, value in os.environ.items() if name not in moved}
    clean[HANDOVER_VARIABLE] = str(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], clean)
    except OSError as exc:  # the interpreter vanished: run on, with the environment as it is
        os.close(fd)
        log.warning("could not start again without the secrets in the environment "
                    "(%s): /proc/%d/environ still shows them", exc.strerror or exc, os.getpid())


def take_over(environ: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    """In a gateway executed by :func:`exec_without_secrets`: the secrets back into
    ``os.environ`` (not into the environment block), the descriptor closed. Returns
    their names (none: this process was not started that way)."""
    value = environ.pop(HANDOVER_VARIABLE, None)
    if value is None:
        return []
    try:
        fd = int(value)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        os.close(fd)
        moved = json.loads(b"".join(chunks))
    except (ValueError, OSError) as exc:
        raise RuntimeError(f"{HANDOVER_VARIABLE}={value!r} names no readable handover "
                           f"of the secrets ({exc}); it is set by chatkernel run itself: "
                           "unset it") from None
    environ.update({str(name): str(secret) for name, secret in moved.items()})
    return sorted(moved)


def make_non_dumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)`` on Linux; whether it took (elsewhere: False)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
