"""What each account's sends are held to: its rate limiter, its retry policy and its
:class:`~chatkernel.core.outbound.retry.Outage`, made from the channel's declared limits
and the config's ``rate_limits`` and ``retry`` overrides when the account is checked
(a bad override is a ConfigError then, not at the first send), or on first use."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatkernel.core.outbound.retry import Outage, RetryPolicy, outage_reason
from chatkernel.sdk.errors import ConfigError
from chatkernel.sdk.models import Account, SendError

if TYPE_CHECKING:
    from chatkernel.core.outbound.ratelimit import Pacing, RateLimiter


class SendLimits:
    """Each account's rate limiter, retry policy and outage, by account key.

    ``channel_config(name)``: a channel's config section, or None; ``config_path`` names
    the file in errors; ``pacing``: the time the rate limits count in.
    """

    def __init__(self, *, channel_config: Callable[[str], Any], config_path: Path | None,
                 pacing: "Pacing") -> None:
        self._channel_config = channel_config
        self._config_path = config_path
        self._pacing = pacing
        self.limiters: dict[str, RateLimiter] = {}
        self.policies: dict[str, RetryPolicy] = {}
        self.outages: dict[str, Outage] = {}

    def prepare(self, account: Account) -> None:
        """Build the account's rate limiter and retry policy from the channel's
        declared limits and the ``rate_limits`` / ``retry`` config overrides."""
        from chatkernel.core.outbound.ratelimit import RateLimiter

        section = self._channel_config(account.channel_name)
        limits = account.channel.limits  # type: ignore[union-attr]
        prefix = f"channels.{account.channel_name}"
        try:
            self.limiters[account.key] = RateLimiter.from_limits(
                limits.rates, getattr(section, "rate_limits", None),
                clock=self._pacing.clock, sleep=self._pacing.sleep)
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), path=self._config_path,
                              key=f"{prefix}.rate_limits") from None
        try:
            policy = self.policies[account.key] = RetryPolicy.from_config(
                getattr(section, "retry", None), base_delay=limits.retry_base_delay)
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), path=self._config_path,
                              key=f"{prefix}.retry") from None
        runtime = account.runtime

        def outage_changed(error: SendError | None) -> None:
            if error is None:
                runtime.send_ok()
            else:
                runtime.send_failed(f"{outage_reason(error)}: {error}", time.time())

        self.outages[account.key] = Outage(account.key, policy, on_change=outage_changed)

    def limiter(self, account: Account) -> "RateLimiter":
        """The account's rate limiter (built from its limits on first use)."""
        if account.key not in self.limiters:
            self.prepare(account)
        return self.limiters[account.key]

    def outage(self, account: Account) -> Outage:
        """The account's :class:`Outage`: whether its platform is down now, and how many
        of its probes were refused (built with its limits on first use)."""
        if account.key not in self.outages:
            self.prepare(account)
        return self.outages[account.key]

    def policy(self, account: Account) -> RetryPolicy:
        """The account's retry policy (built with its limits on first use)."""
        if account.key not in self.policies:
            self.prepare(account)
        return self.policies[account.key]
