"""Traces of what becomes of each message, through OpenTelemetry (optional).

A kernel holds one :class:`Tracer`. Without a ``[telemetry]`` table it is :data:`OFF`,
whose calls do nothing and import nothing; the kernel asks :attr:`Tracer.on` before it
builds any attribute, so a message costs an attribute read where a span would start.
With the table, :func:`tracer_for` builds the OpenTelemetry one (the ``otel`` extra: the
SDK, a ``BatchSpanProcessor`` and the OTLP/HTTP exporter), with its own
``TracerProvider``: nothing process-global is set, so several kernels in one process
(tests) keep their traces apart.

One trace per message: its root is the webhook's HTTP request that brought it (a
server span, made once the request delivers a message) or the message's ``receive``
span; below it the journal write, the pipeline, the turn (and its agent call), each
send of its replies (their retries as events, their rate-limit waits as spans) and the
statuses the platform reports for them later. The pipeline's lines, the session queue
and the outbox hand a message on between tasks, and a task's context is the one it
was started with: so the span a message is at travels with it, on the queued item and
the outbox entry (in memory only, never stored).

The names and attributes follow OpenTelemetry's semantic conventions (messaging, HTTP,
gen_ai); what is the kernel's own is under ``chatkernel.``. No attribute carries a
message's text unless ``capture_content`` is set, nor ever a secret.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatkernel.core.config.schema import TelemetryConfig

#: What a span's attributes may hold.
Attributes = Mapping[str, "str | int | float | bool"]


class Span:
    """A span as the kernel sees it. This one records nothing: the spans of
    :data:`OFF`, and where a trace is not sampled."""

    __slots__ = ()

    #: Whether anything set on it is kept.
    recording = False

    def set(self, key: str, value: str | int | float | bool | None) -> None:
        """Set an attribute (None: left unset)."""

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """Record something that happened at this moment (a retry)."""

    def fail(self, error: BaseException | str) -> None:
        """Mark the span failed: ``error.type`` and an error status."""

    def end(self, end_ns: int | None = None) -> None:
        """End it now, or at ``end_ns`` (``time.time_ns()``)."""


NO_SPAN = Span()


class Tracer:
    """Tracing off: every span is :data:`NO_SPAN`, nothing is imported or sent."""

    #: Whether spans are made (checked before building their attributes).
    on = False
    #: Whether spans may carry message text (``[telemetry] capture_content``).
    capture_content = False

    def start(self, name: str, *, kind: str = "internal", parent: Span | None = None,
              root: bool = False, attributes: Attributes | None = None,
              links: Sequence[Span] = (), start_ns: int | None = None) -> Span:
        """Start a span, a child of ``parent`` (None: of the current span; ``root``:
        of nothing). ``kind``: ``internal``, ``server``, ``client``, ``producer`` or
        ``consumer``; ``links``: spans of other traces it is about."""
        return NO_SPAN

    def inbound(self, name: str, attributes: Attributes, start_ns: int) -> Span:
        """The span of a message coming in: a child of the HTTP request that carries
        it (whose server span is made now), else the root of a new trace."""
        return NO_SPAN

    def current(self) -> Span | None:
        """The span running now in this task (None: none)."""
        return None

    def request(self) -> Span | None:
        """The server span of the HTTP request being handled in this task, made now if
        it is not yet (None: no request, or off)."""
        return None

    @contextlib.contextmanager
    def use(self, span: Span | None) -> Iterator[None]:
        """Make ``span`` the current one in the block: its children's parent, the trace
        id of the log lines written meanwhile."""
        yield

    @contextlib.contextmanager
    def during(self, name: str, *, parent: Span | None, kind: str = "internal",
               attributes: Attributes | None = None, current: bool = False
               ) -> Iterator[Span]:
        """A span for the block, a child of ``parent`` (None: the root of a trace), failed
        by an exception leaving it; ``current``: the current one meanwhile (see
        :meth:`use`). Nothing where ``parent`` records nothing."""
        yield NO_SPAN

    def http_middleware(self) -> Callable[..., Any] | None:
        """An aiohttp middleware that lets a request's messages make its server span
        (None: off)."""
        return None

    def open(self) -> None:
        """Start sending spans (a kernel's start): a kernel built and never started,
        such as the scratch one a reload checks, runs no exporter thread."""

    def shutdown(self) -> None:
        """Send what is buffered, then stop (blocking: run it in a thread)."""


#: The tracer of a kernel without a ``[telemetry]`` table.
OFF = Tracer()


class TelemetryUnavailable(RuntimeError):
    """``[telemetry]`` is set but the ``otel`` extra is not installed."""


def tracer_for(settings: "TelemetryConfig | None",
               redact: Callable[[str], str] = lambda text: text) -> Tracer:
    """The tracer for a config's ``[telemetry]`` table (None: :data:`OFF`); ``redact``
    takes the secrets out of an error's text before a span carries it."""
    if settings is None:
        return OFF
    try:
        return _OtelTracer(settings, redact)
    except ImportError as exc:
        raise TelemetryUnavailable(
            f"[telemetry] needs OpenTelemetry, which is not installed ({exc.name or exc}): "
            "pip install 'chatkernel[otel]', or remove the [telemetry] table") from None


def send_attributes(entry: Any, capture_content: bool = False) -> dict[str, Any]:
    """The attributes of an outbox entry's ``send`` span (messaging's conventions)."""
    payload = entry.payload
    found = {
        "messaging.system": entry.channel, "messaging.operation.type": "send",
        "messaging.operation.name": "send", "messaging.destination.name": entry.route.chat_id,
        "chatkernel.account": f"{entry.channel}:{entry.account}",
        "chatkernel.outbox.id": entry.id, "chatkernel.reply.id": entry.reply_id,
        "chatkernel.chunk.index": payload.chunk_index,
        "chatkernel.chunk.count": payload.chunk_count,
        "chatkernel.payload.kind": "media" if payload.is_media else "text"}
    if not payload.is_media:
        found["messaging.message.body.size"] = len(payload.text.encode())
        if capture_content:
            found["chatkernel.message.text"] = payload.text
    return found


def error_attributes(error: Any) -> dict[str, Any]:
    """A failed platform request (a ``SendError``), as a span event's attributes."""
    found: dict[str, Any] = {"error.type": type(error).__qualname__}
    if getattr(error, "status", None) is not None:
        found["http.response.status_code"] = error.status
    return found


def log_ids() -> tuple[str, str] | None:
    """The trace and span id (hex) of the span running now, when it is sampled: what
    the JSON log lines carry. None when no tracer was ever made in this process."""
    if _current_span is None:
        return None
    context = _current_span().get_span_context()
    if not context.is_valid or not context.trace_flags.sampled:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


# -- OpenTelemetry ------------------------------------------------------------------------------

#: ``opentelemetry.trace.get_current_span``, once a tracer was made (see log_ids).
_current_span: Callable[[], Any] | None = None
#: The HTTP request being handled in this task, when tracing is on (see _Request).
_request: contextvars.ContextVar["_Request | None"] = contextvars.ContextVar(
    "chatkernel_traced_request", default=None)


class _OtelSpan(Span):
    __slots__ = ("span", "context", "redact", "recording")

    def __init__(self, span: Any, context: Any, redact: Callable[[str], str]) -> None:
        self.span = span
        self.recording = span.is_recording()  # False: its trace is not sampled
        self.context = context  # the Context holding it: its children's parent
        self.redact = redact

    def set(self, key: str, value: Any) -> None:
        if value is not None:
            self.span.set_attribute(key, value)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self.span.add_event(name, attributes or {})

    def fail(self, error: BaseException | str) -> None:
        from opentelemetry.trace import Status, StatusCode

        if isinstance(error, BaseException):
            self.span.set_attribute("error.type", type(error).__qualname__)
            # What the log says of it, secrets taken out as there.
            self.span.set_status(Status(StatusCode.ERROR, self.redact(str(error))[:200]))
        else:
            self.span.set_attribute("error.type", error)
            self.span.set_status(Status(StatusCode.ERROR))

    def end(self, end_ns: int | None = None) -> None:
        self.span.end(end_time=end_ns)


class _Request:
    """A traced HTTP request: its server span is made when a message it carries is
    (a request that delivers nothing, a health check, makes none)."""

    __slots__ = ("method", "route", "scheme", "started", "span")

    def __init__(self, method: str, route: str, scheme: str) -> None:
        self.method, self.route, self.scheme = method, route, scheme
        self.started = time.time_ns()
        self.span: _OtelSpan | None = None


class _OtelTracer(Tracer):
    """OpenTelemetry's SDK: sampled by ``sample_ratio`` at each trace's root, the
    spans batched and sent to ``<otlp_endpoint>/v1/traces``."""

    on = True

    def __init__(self, settings: "TelemetryConfig", redact: Callable[[str], str]) -> None:
        global _current_span
        from opentelemetry import context, trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        from chatkernel import __version__

        self.capture_content = settings.capture_content
        self._redact = redact
        self._context, self._trace = context, trace
        self._kinds = {"internal": trace.SpanKind.INTERNAL, "server": trace.SpanKind.SERVER,
                       "client": trace.SpanKind.CLIENT, "producer": trace.SpanKind.PRODUCER,
                       "consumer": trace.SpanKind.CONSUMER}
        self._root = context.Context()  # no parent: a new trace
        resource = Resource.create({"service.name": settings.service_name,
                                    "service.version": __version__})
        self._provider = TracerProvider(
            resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
        self._exporter = OTLPSpanExporter(endpoint=f"{settings.otlp_endpoint}/v1/traces",
                                          timeout=10)
        self._opened = False
        self._tracer = self._provider.get_tracer("chatkernel", __version__)
        _current_span = trace.get_current_span

    def start(self, name: str, *, kind: str = "internal", parent: Span | None = None,
              root: bool = False, attributes: Attributes | None = None,
              links: Sequence[Span] = (), start_ns: int | None = None) -> Span:
        if root:
            context = self._root
        elif isinstance(parent, _OtelSpan):
            context = parent.context
        else:
            context = None  # the current one
        linked = [self._trace.Link(span.span.get_span_context()) for span in links
                  if isinstance(span, _OtelSpan)]
        span = self._tracer.start_span(name, context=context, kind=self._kinds[kind],
                                       attributes=attributes, links=linked,
                                       start_time=start_ns)
        return _OtelSpan(span, self._trace.set_span_in_context(span), self._redact)

    def inbound(self, name: str, attributes: Attributes, start_ns: int) -> Span:
        request = self.request()
        return self.start(name, kind="consumer", parent=request, root=request is None,
                          attributes=attributes, start_ns=start_ns)

    def request(self) -> Span | None:
        request = _request.get()
        if request is None:
            return None
        if request.span is None:
            request.span = self.start(  # type: ignore[assignment]
                f"{request.method} {request.route}", kind="server", root=True,
                start_ns=request.started, attributes={
                    "http.request.method": request.method, "http.route": request.route,
                    "url.scheme": request.scheme})
        return request.span

    def current(self) -> Span | None:
        span = self._trace.get_current_span()
        if not span.get_span_context().is_valid:
            return None
        return _OtelSpan(span, self._trace.set_span_in_context(span), self._redact)

    @contextlib.contextmanager
    def use(self, span: Span | None) -> Iterator[None]:
        if not isinstance(span, _OtelSpan):
            yield
            return
        token = self._context.attach(span.context)
        try:
            yield
        finally:
            self._context.detach(token)

    @contextlib.contextmanager
    def during(self, name: str, *, parent: Span | None, kind: str = "internal",
               attributes: Attributes | None = None, current: bool = False
               ) -> Iterator[Span]:
        if parent is not None and not parent.recording:
            yield NO_SPAN
            return
        span = self.start(name, kind=kind, parent=parent, root=parent is None,
                          attributes=attributes)
        try:
            if current:
                with self.use(span):
                    yield span
            else:
                yield span
        except BaseException as exc:
            span.fail(exc)
            raise
        finally:
            span.end()

    def http_middleware(self) -> Callable[..., Any]:
        from aiohttp import web

        @web.middleware
        async def traced(request: web.Request, handler: Any) -> web.StreamResponse:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else request.path
            traced_request = _Request(request.method, route, request.scheme)
            token = _request.set(traced_request)
            status = 500
            try:
                response = await handler(request)
                status = response.status
                return response
            except web.HTTPException as exc:
                status = exc.status
                raise
            finally:
                _request.reset(token)
                span = traced_request.span
                if span is not None:
                    span.set("http.response.status_code", status)
                    if status >= 500:
                        span.fail(str(status))
                    span.end()

        return traced

    def open(self) -> None:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if not self._opened:
            self._opened = True
            self._provider.add_span_processor(BatchSpanProcessor(self._exporter))

    def shutdown(self) -> None:
        if self._opened:
            self._provider.force_flush()
        self._provider.shutdown()
