{%- set P = cookiecutter.__class_prefix -%}
{%- set T = cookiecutter.transport -%}
{%- set NAME = cookiecutter.channel_name | upper -%}
"""The fake {{ cookiecutter.channel_name }} platform as a server, to try the channel offline::

    python -m {{ cookiecutter.__package_name }}.devserver --port 8900

Its first line on stdout is JSON (``base_url``, ``token``{% if T == "webhook" %}, ``secret``{% endif %}), printed once it
listens; the config snippet goes to stderr. Its developer routes (``/_fake/*``) are
:meth:`{{ P }}Platform.developer_routes`; the runner (``chatkernel.testing.devserver``)
does the rest: ``--port``, ``--latency``, the first line, ``GET /_fake/ready``, signals.
"""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from {{ cookiecutter.__package_name }}.fake import {{ P }}Platform


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
    snippet=_snippet,
    options={"--token": {"default": "dev-token"}{% if T == "webhook" %},
             "--secret": {"default": "dev-secret",
                          "help": "what the fake sends in X-{{ P }}-Secret"}{% endif %}})
main = server.main

if __name__ == "__main__":
    main()
