"""The HTTP server of a node: the routes, the OpenAPI document and the dashboard, on
aiohttp, in the node's event loop, as strict as the gRPC port beside it.

A request to an API route passes, in this order, and stops at the first refusal:

1. the connection's caps and timeouts (``connections``; TLS with the node's
   certificate, and a client certificate required when the node requires one);
2. the site rules, on every request (``origins``: ``Host``, ``Origin``, a write's
   content type);
3. its credential, judged from the headers and the TLS connection alone
   (``caller``), before a byte of its body is read; a refused request's connection is
   closed with its body unread;
4. its body, read within the owner's cap and in time, decoded off the event loop when
   large (``bodies``), then held to the owner's ``max_request_bytes`` as gRPC holds it;
5. the servicer, called in-process (``services``).

A write refused at any step is audited with its reason (the credential's refusals by
``auth.refusals``). Every response carries ``X-Content-Type-Options: nosniff``; the
dashboard's pages a ``Content-Security-Policy`` that lets them load only the node's own
scripts and styles, and be framed by no one.

``start_http`` binds the listener (port 0 picks one) and returns the running server;
``HttpServer.stop`` closes it, ending streams in progress.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web

from shardcron.client.errors import InvalidArgument, ShardcronError
from shardcron.client.limits import clip
from shardcron.client.tls import ServerTls, check_listen, listen_host
from shardcron.coordinator.http.bodies import (
    BodyTimeout,
    BodyTooLarge,
    Decoder,
    json_cap,
    parse_json,
    read_body,
)
from shardcron.coordinator.http.connections import (
    ConnectionGate,
    ConnectionLimits,
    GatedSite,
    tls_context,
)
from shardcron.coordinator.http.errors import error_body, error_response
from shardcron.coordinator.http.mapping import build_request, query_fields
from shardcron.coordinator.http.openapi import openapi_document
from shardcron.coordinator.http.origins import SitePolicy
from shardcron.coordinator.http.routes import ROUTES, Route
from shardcron.coordinator.http.services import Services
from shardcron.coordinator.service import MAX_MESSAGE_BYTES

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = json_cap(MAX_MESSAGE_BYTES)  # no owner's body is read past this
MAX_HEADERS = 64  # header lines in one request head

EVERY_RESPONSE = {"X-Content-Type-Options": "nosniff"}
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none';"
        " base-uri 'none'; form-action 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
API_HEADERS = {"Cache-Control": "no-store"}
# aiohttp's own refusals of an API path, answered in the API's error form
_ROUTING_CODES = {404: grpc.StatusCode.NOT_FOUND, 405: grpc.StatusCode.UNIMPLEMENTED}


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpConfig:
    """Where and how a node serves HTTP: ``listen`` (``host:port``), TLS as its gRPC
    port has it (plaintext beyond loopback only with ``insecure``), the hosts and
    origins beyond its own it serves (``origins``) and its connections' limits."""

    listen: str
    tls: ServerTls | None = None
    insecure: bool = False
    advertise: str = ""
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)

    def check(self) -> None:
        """InvalidArgument (field ``http_listen``) for plaintext beyond loopback."""
        check_listen(
            self.listen, tls=self.tls is not None, insecure=self.insecure, field="http_listen"
        )

    def site_policy(self) -> SitePolicy:
        return SitePolicy.of(
            self.listen,
            advertise=self.advertise,
            allowed_hosts=self.allowed_hosts,
            allowed_origins=self.allowed_origins,
        )


async def _request_message(
    route: Route,
    request: web.Request,
    owner: str,
    services: Services,
    decoder: Decoder,
    limits: ConnectionLimits,
) -> Any:
    """The proto request of ``route`` from the HTTP request (see ``mapping``): body,
    then path parameters, then query parameters."""
    if route.request is None:
        return None
    query: dict[str, list[str]] = {}
    for name in request.query:
        if name in route.extra_query:
            continue
        if name not in route.query:
            raise InvalidArgument(name, "not a query parameter of this route")
        query[name] = request.query.getall(name)
    fields = dict(request.match_info)  # path parameters are named by their JSON names
    fields.update(query_fields(route.request.DESCRIPTOR, query, route.aliases))
    if not route.body:
        return build_request(route.request, fields)
    limit = services.quotas.quotas.for_owner(owner).max_request_bytes
    raw = await read_body(
        request, cap=min(json_cap(limit), MAX_BODY_BYTES), limit=limit, seconds=limits.body_timeout
    )
    message_type = route.request

    def decode() -> Any:
        body = parse_json(raw)
        body.update(fields)
        return build_request(message_type, body)

    message = await decoder.decode(len(raw), decode)
    services.check_size(owner, message)
    return message


def _refusal(e: Exception, route: Route, *, close: bool) -> web.Response:
    response = error_response(e, route.operation)
    if close:
        response.force_close()
    return response


def _view(
    route: Route, services: Services, decoder: Decoder, limits: ConnectionLimits
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:  # the credential, from the headers alone; a refusal leaves the body unread
            owner = services.owner(route.rpc, request)
        except Exception as e:
            return _refusal(e, route, close=True)
        try:
            message = await _request_message(route, request, owner, services, decoder, limits)
        except ShardcronError as e:
            services.refused_write(route.rpc, request, e, owner=owner)
            return _refusal(e, route, close=isinstance(e, BodyTooLarge | BodyTimeout))
        try:
            return await route.serve(services, request, message)
        except Exception as e:  # every failure is answered, as its status
            return error_response(e, route.operation)

    handle.api_route = route  # type: ignore[attr-defined]
    return handle


def _guard(policy: SitePolicy, services: Services) -> Any:
    """The site rules (``origins``) in front of every request, and the headers every
    answer carries."""

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        route: Route | None = getattr(handler, "api_route", None)
        try:
            policy.check(request, octets=route is not None and route.octets)
        except ShardcronError as e:
            if route is not None:
                services.refused_write(route.rpc, request, e)
            response: web.StreamResponse = error_response(e, "site rules")
            response.force_close()
            return response
        try:
            return await handler(request)
        except web.HTTPException as e:  # no route, or no such method on it
            if not request.path.startswith("/v1/") or e.status < 400:
                raise
            code = _ROUTING_CODES.get(e.status, grpc.StatusCode.INVALID_ARGUMENT)
            body = error_body(code, f"{e.reason}: {request.method} {clip(request.path)}")
            return web.json_response(body, status=e.status)

    return guard


async def _headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(EVERY_RESPONSE)
    if request.path.startswith("/v1/"):
        for key, value in API_HEADERS.items():
            response.headers.setdefault(key, value)
    else:
        response.headers.update(PAGE_HEADERS)


def build_app(services: Services, policy: SitePolicy, limits: ConnectionLimits) -> web.Application:
    """The aiohttp application: ``ROUTES``, ``/v1/openapi.json``, the dashboard at ``/``."""
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_guard(policy, services)])
    app.on_response_prepare.append(_headers)
    decoder = Decoder()
    for route in ROUTES:
        app.router.add_route(route.method, route.path, _view(route, services, decoder, limits))
    document = openapi_document()

    async def openapi(_request: web.Request) -> web.Response:
        return web.json_response(document)

    async def dashboard(_request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    app.router.add_get("/v1/openapi.json", openapi)
    app.router.add_get("/", dashboard)
    app.router.add_static("/ui/", STATIC)
    return app


@dataclass(slots=True)
class HttpServer:
    runner: web.AppRunner
    port: int
    gate: ConnectionGate

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_http(
    config: HttpConfig, services: Services, *, on_refused: Callable[[], None] = lambda: None
) -> HttpServer:
    """Serves ``build_app`` as ``config`` says; returns once bound. ``on_refused`` counts
    each connection refused over the caps. Raises ``InvalidArgument`` for plaintext
    beyond loopback or a TLS file that cannot be read, ``OSError`` when the address
    cannot be bound."""
    config.check()
    ssl_context = tls_context(config.tls) if config.tls is not None else None
    limits = config.limits
    runner = web.AppRunner(
        build_app(services, config.site_policy(), limits),
        access_log=None,
        shutdown_timeout=1.0,
        keepalive_timeout=limits.head_timeout,  # also the time to send a request head
        lingering_time=0,  # a body left unread closes the connection, not read for it
        max_headers=MAX_HEADERS,
    )
    await runner.setup()
    gate = ConnectionGate(limits, on_refused)
    host = listen_host(config.listen) or "127.0.0.1"
    port = int(config.listen.rpartition(":")[2])
    site = GatedSite(runner, host, port, gate=gate, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return HttpServer(runner=runner, port=site.port, gate=gate)
