{%- set P = cookiecutter.__class_prefix -%}
{%- set T = cookiecutter.transport -%}
{%- set NAME = cookiecutter.channel_name | upper -%}
"""The fake {{ cookiecutter.channel_name }} platform as a server, to try the channel offline::

    python -m {{ cookiecutter.__package_name }}.devserver --port 8900

Its first line on stdout is JSON (``base_url``, ``token``{% if T == "webhook" %}, ``secret``{% endif %}), printed once it
listens; the config snippet goes to stderr. Its developer routes, which the real
platform does not have:

``POST /_fake/messages``  ``{"chat_id": "dm-1", "text": "hi"}`` (optional ``sender_id``,
                          ``sender_name``, ``is_group``, ``mentions_bot``, ``thread_id``):
                          a user writes; answers ``{"event_id": n}``.
``GET /_fake/sent``       ``?chat_id=dm-1`` (optional; ``&wait=10`` waits for one): what
                          the bot sent, ``{"messages": [{"chat_id", "text", ...}]}``.
{%- if T == "webhook" %}
``POST /_fake/webhook``   ``{"url": "http://127.0.0.1:8787/{{ cookiecutter.channel_name }}/main/webhook"}``:
                          where events are posted from now on.
{%- endif %}

The runner (``chatkernel.testing.devserver``) does the rest: ``--port``, the first line,
``GET /_fake/ready``, signals. Grow the routes with your fake.
"""

from __future__ import annotations

import dataclasses

from aiohttp import web

from chatkernel.testing.devserver import DevServer, fields, json_body, wait_until
from {{ cookiecutter.__package_name }}.fake import {{ P }}Platform

MESSAGE_FIELDS = {"chat_id": str, "text": str, "sender_id": str, "sender_name": str,
                  "is_group": bool, "mentions_bot": bool, "thread_id": str}


def developer_routes(platform: {{ P }}Platform) -> list[web.RouteDef]:
    """Write as a user, read what the bot sent{% if T == "webhook" %}, point the webhook{% endif %}."""

    async def messages(request: web.Request) -> web.Response:
        body = fields(await json_body(request), MESSAGE_FIELDS, required=("chat_id", "text"))
        event = platform.inject(body.pop("chat_id"), body.pop("text"), **body)
        return web.json_response({"event_id": event["event_id"]})

    async def sent(request: web.Request) -> web.Response:
        chat_id = request.query.get("chat_id")

        def chosen() -> list:
            return [m for m in platform.sent_messages if chat_id in (None, m.chat_id)]

        await wait_until(request, platform, lambda: bool(chosen()))
        return web.json_response({"messages": [dataclasses.asdict(m) for m in chosen()]})
{%- if T == "webhook" %}

    async def webhook(request: web.Request) -> web.Response:
        platform.point_webhook(fields(await json_body(request), {"url": str},
                                      required=("url",))["url"])
        return web.json_response({"ok": True})
{%- endif %}

    return [web.post("/_fake/messages", messages), web.get("/_fake/sent", sent){% if T == "webhook" %},
            web.post("/_fake/webhook", webhook){% endif %}]


def _options(parser) -> None:
    parser.add_argument("--token", default="dev-token")
{%- if T == "webhook" %}
    parser.add_argument("--secret", default="dev-secret",
                        help="what the fake sends in X-{{ P }}-Secret")
{%- endif %}


def _snippet(platform: {{ P }}Platform, args) -> str:
    base = platform.base_url
    return "\n".join([
        "# the fake {{ cookiecutter.channel_name }} platform is up; point an account at it:",
        "#   export {{ NAME }}_TOKEN=" + platform.token,
{%- if T == "webhook" %}
        "#   export {{ NAME }}_WEBHOOK_SECRET=" + platform.secret,
{%- endif %}
        "[channels.{{ cookiecutter.channel_name }}.accounts.main]",
        'token = "${{ '{' }}{{ NAME }}_TOKEN}"',
{%- if T == "webhook" %}
        'webhook_secret = "${{ '{' }}{{ NAME }}_WEBHOOK_SECRET}"',
{%- endif %}
        'base_url = "' + base + '"',
        'allow_from = ["*"]',
{%- if T == "webhook" %}
        "# once the gateway runs, point the fake's webhook at it:",
        "#   curl -d '{\"url\": \"http://127.0.0.1:8787/{{ cookiecutter.channel_name }}/main/webhook\"}' "
        + base + "/_fake/webhook",
{%- endif %}
        "# then write as a user:",
        "#   curl -d '{\"chat_id\": \"dm-1\", \"text\": \"hello\"}' " + base + "/_fake/messages",
        "#   curl '" + base + "/_fake/sent?chat_id=dm-1&wait=10'"])


server = DevServer(
    prog="python -m {{ cookiecutter.__package_name }}.devserver", port=8900,
    description="Run the fake {{ cookiecutter.channel_name }} platform as a server.",
    platform=lambda args: {{ P }}Platform(token=args.token{% if T == "webhook" %}, secret=args.secret{% endif %}),
    announce=lambda platform, args: {"base_url": platform.base_url, "token": platform.token{% if T == "webhook" %},
                                     "secret": platform.secret{% endif %}},
    snippet=_snippet, routes=developer_routes, options=_options)
main = server.main

if __name__ == "__main__":
    main()
