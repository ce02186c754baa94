"""The control API over HTTP: how the CLI talks to a running gateway.

The gateway serves ``/control/*`` on its HTTP server, each request answered by the
kernel's :class:`~chatkernel.core.runtime.control.Control`, and writes
``$CHATKERNEL_HOME/gateway.json`` (chatkernel.core.gateway_state) while it runs.
Every control request needs ``Authorization: Bearer <token>``: the token is
``gateway.control_token`` from the config when set, else a random one made at
start. Commands that find no running gateway ask a kernel of their own instead.
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Any

from chatkernel.core.gateway_state import GatewayInfo
from chatkernel.core.runtime.control import ControlError, strings

if TYPE_CHECKING:
    from chatkernel.core.runtime.control import Control
    from chatkernel.core.runtime.pairing_control import PairingControl

#: The largest control request body (a send's text and file paths, a few settings).
MAX_BODY_BYTES = 1024 * 1024


def new_token() -> str:
    return secrets.token_urlsafe(24)


def call(info: GatewayInfo, path: str, body: dict[str, Any], timeout: float = 30.0
         ) -> tuple[int, dict[str, Any]]:
    """POST to a running gateway's control API (the CLI side; stdlib only, for speed)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        info.url + path, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {info.token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.load(exc)
        except ValueError:
            return exc.code, {"error": exc.reason}


def routes(control: "Control", token: str, pairing: "PairingControl | None" = None
           ) -> list[tuple[str, str, Any]]:
    """The ``/control`` routes of the gateway's HTTP app, each answering through
    ``control`` (``/control/pairing/*`` through ``pairing``)."""
    from aiohttp import web

    from chatkernel.core.gateway.endpoints import bearer_ok
    from chatkernel.core.gateway.http_guard import RequestError, read_json_object

    def handler(action):
        async def handle(request: web.Request) -> web.Response:
            if not bearer_ok(request, token):
                return web.json_response({"error": "missing or wrong control token"},
                                         status=401)
            try:
                body = (await read_json_object(request, limit=MAX_BODY_BYTES)
                        if request.can_read_body else {})
            except RequestError as exc:
                return web.json_response({"error": str(exc)}, status=exc.status)
            try:
                if isinstance(body.get("client"), dict):  # the caller says who it is
                    control.report_presence(body["client"], request.remote)
                return web.json_response(await action(body))
            except ControlError as exc:
                return web.json_response({"error": str(exc)}, status=exc.status)
        return handle

    async def session_policy(body: dict[str, Any]) -> dict[str, Any]:
        fields = strings(body, "session", "policy")
        return await control.set_session_policy(fields["session"] or "",
                                                fields["policy"] or "")

    async def reload(body: dict[str, Any]) -> dict[str, Any]:
        return await control.reload(strings(body, "config")["config"])

    return [("POST", "/control/send", handler(control.send)),
            ("POST", "/control/status", handler(control.status)),
            ("POST", "/control/health", handler(control.health)),
            ("POST", "/control/channels/probe", handler(control.probe)),
            ("POST", "/control/presence", handler(control.presence)),
            ("POST", "/control/sessions/policy", handler(session_policy)),
            ("POST", "/control/heartbeat/status", handler(control.heartbeat_status)),
            ("POST", "/control/heartbeat/wake", handler(control.wake_heartbeat)),
            ("POST", "/control/reload", handler(reload)),
            ("POST", "/control/deliveries/list", handler(control.deliveries)),
            ("POST", "/control/deliveries/retry", handler(control.retry_delivery)),
            ("POST", "/control/deliveries/discard", handler(control.discard_delivery)),
            *((method, path, handler(action)) for method, path, action in
              (pairing.routes() if pairing is not None else ()))]
