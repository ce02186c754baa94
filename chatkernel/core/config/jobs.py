"""``[jobs.<name>]`` and ``[triggers.<name>]``: the agent acting at a time, or when
another system calls (docs/jobs.md).

A job has one schedule: ``cron`` (with ``tz``), ``every``, or ``at`` (ISO 8601 with an
offset); ``in`` (a span from now) is what ``chatkernel jobs add --in`` and ``/remind``
turn into an ``at``. Each model checks its own values, so ``config validate`` and ``run``
refuse a bad cron expression or an unknown time zone naming the key; the targets of
``deliver_to`` are checked against the installed channels and configured accounts by
:func:`chatkernel.core.jobs.checks.check_jobs`.
"""

from __future__ import annotations

import re
import string
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from chatkernel.core.config.schema import JOB_NAME, ActiveHours, Section, check_timezone

__all__ = ["JOB_NAME", "JobConfig", "TriggerConfig", "check_cron", "parse_at", "parse_target",
           "template_fields"]
#: A prompt template's placeholder: a top-level field of the JSON body.
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def parse_target(text: str) -> tuple[str, str, str]:
    """``"telegram:main:123456"`` → ``("telegram", "main", "123456")``; the chat id may
    itself hold colons (``slack:work:C123:thread`` is chat ``C123:thread``). ValueError
    says what is expected."""
    channel, _, rest = text.strip().partition(":")
    account, _, chat = rest.partition(":")
    if not channel or not account or not chat:
        raise ValueError(f"{text!r} is not a target: expected channel:account:chat, such as "
                         "telegram:main:123456")
    return channel, account, chat


def parse_at(value: str) -> datetime:
    """An ISO 8601 moment with its offset (``2026-12-24T09:00+01:00``); ValueError
    names what is missing."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"{value!r} is not an ISO 8601 time: expected e.g. "
                         "2026-12-24T09:00+01:00") from None
    if moment.tzinfo is None:
        raise ValueError(f"{value!r} has no offset: write it with one, e.g. "
                         f"{value.strip()}+01:00 or {value.strip()}Z")
    return moment


def check_cron(expression: str) -> str:
    """A cron expression cronsim reads (5 fields, or 6 with seconds first); ValueError
    says what is wrong with it."""
    from cronsim import CronSim, CronSimError

    try:
        CronSim(expression, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise ValueError(f"not a cron expression ({exc}): {expression!r}; expected five "
                         "fields, minute hour day month weekday, such as '30 7 * * 1-5'"
                         ) from None
    return expression


def template_fields(template: str) -> list[str]:
    """The ``{field}`` placeholders of a prompt template, in order; ValueError for one
    that is not a plain field name (``{a.b}``, ``{0}``, a lone brace)."""
    fields: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"not a prompt template ({exc}): write {{{{ and }}}} for a brace"
                         ) from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not FIELD_NAME.fullmatch(name) or spec or conversion:
            raise ValueError(f"{{{name}{'!' + conversion if conversion else ''}"
                             f"{':' + spec if spec else ''}}} is not a placeholder: a "
                             "placeholder names a top-level field of the JSON body, {field}")
        if name not in fields:
            fields.append(name)
    return fields


class _Targets(Section):
    """What jobs and triggers share: the agent, the prompt and where the answer goes."""

    prompt: str = Field(min_length=1)
    #: The agent by name (``[agents.<name>]``); None: the default agent, or in the target
    #: chat's session the agent that chat is bound to.
    agent: str | None = None
    #: ``channel:account:chat`` strings; none: the run keeps its transcript only.
    deliver_to: list[str] = Field(default_factory=list)

    @field_validator("deliver_to", mode="before")
    @classmethod
    def _targets(cls, value: Any) -> Any:
        if isinstance(value, str):  # one target may be written alone
            value = [value]
        if isinstance(value, list):
            for item in value:
                if isinstance(item, str):
                    parse_target(item)
        return value


class JobConfig(_Targets):
    """``[jobs.<name>]`` (see docs/jobs.md)."""

    cron: str | None = None
    #: The cron expression's time zone: an IANA name, or ``local`` (the gateway's).
    tz: str = "local"
    every: str | None = None
    at: str | None = None
    #: A span from now (``20m``): taken by ``jobs add`` and ``/remind``, stored as ``at``.
    in_: str | None = Field(None, alias="in")
    session: Literal["isolated", "target"] = "isolated"
    catch_up: Literal["once", "skip"] = "once"
    enabled: bool = True
    active_hours: ActiveHours | None = None

    model_config = Section.model_config | {"populate_by_name": True}

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return None if value is None else check_cron(value.strip())

    @field_validator("tz")
    @classmethod
    def _tz(cls, value: str) -> str:
        return value if value == "local" else check_timezone(value)

    @field_validator("every", "in_", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> Any:
        from chatkernel.core.durations import parse_interval

        if value is None:
            return None
        if parse_interval(value) <= 0:  # ValueError names what is wrong
            raise ValueError("expected a span of time, such as 30s, 20m, 2h or 1d")
        return str(value).strip()

    @field_validator("at")
    @classmethod
    def _at(cls, value: str | None) -> str | None:
        return None if value is None else parse_at(value).isoformat()

    @model_validator(mode="after")
    def _one_schedule(self) -> "JobConfig":
        given = [key for key, value in (("cron", self.cron), ("every", self.every),
                                        ("at", self.at), ("in", self.in_))
                 if value is not None]
        if len(given) != 1:
            which = " and ".join(given) if given else "none"
            raise ValueError(f"a job has one schedule, cron (with tz), every, at or in; "
                             f"this one has {which}")
        if self.tz != "local" and self.cron is None:
            raise ValueError("tz is the time zone of a cron expression: give cron too")
        if self.session == "target" and not self.deliver_to:
            raise ValueError('session = "target" runs in the target chat\'s session: give '
                             "deliver_to")
        return self

    def interval(self) -> float | None:
        """``every`` in seconds (None: not an interval job)."""
        from chatkernel.core.durations import parse_interval

        return None if self.every is None else parse_interval(self.every)


class TriggerConfig(_Targets):
    """``[triggers.<name>]``: ``POST /hooks/<name>`` runs the agent (see docs/jobs.md)."""

    #: HMAC-SHA256 signing secret: ``X-Chatkernel-Signature: v1=<hex of
    #: "v1:<timestamp>:<raw body>">`` with ``X-Chatkernel-Timestamp``.
    secret: str | None = None
    #: Or a bearer token, for a caller that can only send one.
    token: str | None = None
    #: The largest body taken, in bytes (413 beyond).
    max_body_bytes: int = Field(64 * 1024, ge=1, le=1024 * 1024)
    #: Requests taken per minute (429 beyond, with Retry-After).
    per_minute: int = Field(30, ge=1, le=10_000)

    @field_validator("prompt")
    @classmethod
    def _template(cls, value: str) -> str:
        template_fields(value)
        return value

    @model_validator(mode="after")
    def _one_credential(self) -> "TriggerConfig":
        if bool(self.secret) == bool(self.token):
            raise ValueError("a trigger has one credential: secret (HMAC signatures) or "
                             "token (a bearer token); write it as ${ENV}")
        return self

