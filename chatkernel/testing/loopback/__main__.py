"""``python -m chatkernel.testing.loopback --platform URL``: the real gateway with the
loopback channel, the process the crash tests kill."""

from __future__ import annotations

import argparse

import anyio

from chatkernel.testing.loopback.channel import LoopbackPlugin


def main() -> None:
    """Run the real gateway with the loopback channel (for crash tests)."""
    from chatkernel.core import config as cfg
    from chatkernel.core import logs
    from chatkernel.core.gateway.process import run_gateway
    from chatkernel.core.plugins import PluginManager

    parser = argparse.ArgumentParser()
    parser.add_argument("--platform", required=True, help="the LoopbackPlatform's URL")
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--idempotent-sends", action="store_true",
                        help="declare the loopback account's sends idempotent")
    parser.add_argument("--streaming", action="store_true",
                        help="live replies on (streaming = \"on\")")
    parser.add_argument("--echo-typing-ms", type=int, default=0,
                        help="the echo agent types its answer a word every N ms")
    args = parser.parse_args()
    config = cfg.parse({
        "gateway": {"listen": args.listen},
        "agent": {"echo_typing_ms": args.echo_typing_ms},
        "queue": {"debounce_ms": 0, "mode": "followup"},
        "channels": {"loopback": {"streaming": "on" if args.streaming else "off",
                                  "streaming_interval_ms": 100,
                                  "accounts": {"main": {
                                      "base_url": args.platform, "poll_timeout": 0.5,
                                      "idempotent_sends": args.idempotent_sends}}}},
    })
    logs.configure("text", "info")
    pm = PluginManager()
    pm.load(only=[])
    pm.register(LoopbackPlugin, name="chatkernel.testing.loopback")
    anyio.run(lambda: run_gateway(config, pm=pm))


if __name__ == "__main__":
    main()
