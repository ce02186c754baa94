"""A local OTLP/HTTP receiver, for tests of a gateway's traces (``[telemetry]``).

It listens on 127.0.0.1, takes ``POST /v1/traces`` as an OpenTelemetry collector does,
decodes the protobuf ``ExportTraceServiceRequest`` with ``opentelemetry.proto`` (which
comes with the OTLP exporter: the ``otel`` extra) and keeps every span::

    async with OtlpReceiver() as otlp:
        config = {"telemetry": {"otlp_endpoint": otlp.endpoint}, ...}
        ...  # run a gateway with it, send a message, stop it (its spans are sent)
        [turn] = otlp.named("turn")
        assert otlp.parent(turn).name == "process webchat"
        print(otlp.tree(turn.trace_id))  # the trace's spans by name, children indented
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["OtlpReceiver", "ReceivedSpan"]

#: The span kinds of OTLP's protobuf, by number.
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer",
         5: "consumer"}


@dataclass
class ReceivedSpan:
    """One span as the receiver got it: ids in hex, attributes as Python values."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str
    attributes: dict[str, Any]
    #: (name, attributes) of each event, in order.
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: (trace id, span id) of each link.
    links: list[tuple[str, str]] = field(default_factory=list)
    #: "unset", "ok" or "error", and the status's description.
    status: str = "unset"
    status_message: str = ""
    start_ns: int = 0
    end_ns: int = 0
    #: The attributes of the resource it came with (``service.name``...).
    resource: dict[str, Any] = field(default_factory=dict)


class OtlpReceiver:
    """An OTLP/HTTP endpoint on a free port of 127.0.0.1 that keeps what it is sent."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        #: The requests it answered.
        self.requests = 0
        self._runner: web.AppRunner | None = None
        self.endpoint = ""

    async def __aenter__(self) -> "OtlpReceiver":
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        #: What ``[telemetry] otlp_endpoint`` is set to.
        self.endpoint = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _traces(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if request.content_type != "application/x-protobuf":
            return web.Response(status=415, text="send protobuf")
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(_span(span, resource))
        self.requests += 1
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    # -- reading what came ---------------------------------------------------------------

    def named(self, name: str) -> list[ReceivedSpan]:
        """The spans called ``name``, in the order they came."""
        return [span for span in self.spans if span.name == name]

    def by_id(self, span_id: str) -> ReceivedSpan | None:
        return next((span for span in self.spans if span.span_id == span_id), None)

    def parent(self, span: ReceivedSpan) -> ReceivedSpan | None:
        """The span's parent among those received (None: a root, or not received)."""
        return self.by_id(span.parent_id) if span.parent_id else None

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        """Every span of one trace."""
        return [span for span in self.spans if span.trace_id == trace_id]

    def children(self, span: ReceivedSpan) -> list[ReceivedSpan]:
        """The span's children, in the order they started."""
        return sorted((other for other in self.spans if other.parent_id == span.span_id),
                      key=lambda other: (other.start_ns, other.name))

    def tree(self, trace_id: str) -> str:
        """A trace as text: a line per span, its name indented two spaces below its
        parent, siblings in the order they started (a span whose parent was not
        received is shown as a root)."""
        spans = self.trace(trace_id)
        ids = {span.span_id for span in spans}
        lines: list[str] = []

        def show(span: ReceivedSpan, depth: int) -> None:
            lines.append("  " * depth + span.name)
            for child in self.children(span):
                show(child, depth + 1)

        for root in sorted((span for span in spans if span.parent_id not in ids),
                           key=lambda span: span.start_ns):
            show(root, 0)
        return "\n".join(lines)

    def texts(self) -> list[str]:
        """Every string the spans carry: names, attribute and event values, statuses'
        descriptions (to check that no message text was sent)."""
        found: list[str] = []
        for span in self.spans:
            values = [*span.attributes.values(),
                      *(value for _, attributes in span.events for value in attributes.values())]
            found += [value for value in values if isinstance(value, str)]
            found += [span.name, span.status_message]
        return found


def _span(span: Any, resource: dict[str, Any]) -> ReceivedSpan:
    return ReceivedSpan(
        name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex() or None, kind=KINDS.get(span.kind, str(span.kind)),
        attributes=_attributes(span.attributes),
        events=[(event.name, _attributes(event.attributes)) for event in span.events],
        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
        status={0: "unset", 1: "ok", 2: "error"}.get(span.status.code, "unset"),
        status_message=span.status.message,
        start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
        resource=resource)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: Any) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, which)
