{%- set P = cookiecutter.__class_prefix -%}
{%- set T = cookiecutter.transport -%}
"""The fake {{ cookiecutter.channel_name }} platform as a server, to try the channel offline::

    python -m {{ cookiecutter.__package_name }}.devserver --port 8900

Its first line on stdout is JSON (``base_url``, ``token``{% if T == "webhook" %}, ``secret``{% endif %}), printed once it
listens; the config snippet goes to stderr. Its developer routes (``/_fake/*``), its
first line and its snippet are the fake's (:meth:`{{ P }}Platform.developer_routes`,
``developer_info``, ``config_snippet``); the runner (``chatkernel.testing.devserver``)
does the rest: ``--port``, ``--latency``, ``GET /_fake/ready``, signals.
"""

from __future__ import annotations

from chatkernel.testing.devserver import DevServer
from {{ cookiecutter.__package_name }}.fake import {{ P }}Platform

server = DevServer(
    prog="python -m {{ cookiecutter.__package_name }}.devserver", port=8900,
    description="Run the fake {{ cookiecutter.channel_name }} platform as a server.",
    platform=lambda args: {{ P }}Platform(token=args.token{% if T == "webhook" %}, secret=args.secret{% endif %}),
    options={"--token": {"default": "dev-token"}{% if T == "webhook" %},
             "--secret": {"default": "dev-secret",
                          "help": "what the fake sends in X-{{ P }}-Secret"}{% endif %}})
main = server.main

if __name__ == "__main__":
    main()
