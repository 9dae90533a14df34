"""The HTTP server of a node: the routes, the OpenAPI document and the dashboard, on
aiohttp, in the node's event loop.

``start_http`` binds ``host:port`` (port 0 picks one) and returns the running server;
``HttpServer.stop`` closes it, ending streams in progress. A request body may be as
large as the largest gRPC message a node takes, its JSON about a third larger.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from shardcron.client.errors import InvalidArgument
from shardcron.coordinator.http.errors import error_response
from shardcron.coordinator.http.mapping import build_request, parse_body, query_fields
from shardcron.coordinator.http.openapi import openapi_document
from shardcron.coordinator.http.routes import ROUTES, Route
from shardcron.coordinator.http.services import Services
from shardcron.coordinator.service import MAX_MESSAGE_BYTES

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 2 * MAX_MESSAGE_BYTES


async def _request_message(route: Route, request: web.Request) -> Any:
    """The proto request of ``route`` from the HTTP request (see ``mapping``)."""
    if route.request is None:
        return None
    fields = parse_body(await request.read()) if route.body else {}
    fields.update(request.match_info)  # path parameters are named by their JSON names
    query: dict[str, list[str]] = {}
    for name in request.query:
        if name in route.extra_query:
            continue
        if name not in route.query:
            raise InvalidArgument(name, "not a query parameter of this route")
        query[name] = request.query.getall(name)
    fields.update(query_fields(route.request.DESCRIPTOR, query, route.aliases))
    return build_request(route.request, fields)


def _view(route: Route, services: Services) -> Any:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            message = await _request_message(route, request)
            return await route.handler(services, request, message)
        except Exception as e:  # every failure is answered, as its status
            return error_response(e, route.operation)

    return handle


def build_app(services: Services) -> web.Application:
    """The aiohttp application: ``ROUTES``, ``/v1/openapi.json``, the dashboard at ``/``."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    for route in ROUTES:
        app.router.add_route(route.method, route.path, _view(route, services))
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

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_http(listen: str, services: Services) -> HttpServer:
    """Serves ``build_app(services)`` on ``listen`` (``host:port``); returns once bound.
    Raises ``OSError`` when the address cannot be bound."""
    host, _, port = listen.rpartition(":")
    runner = web.AppRunner(build_app(services), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host.strip("[]") or "127.0.0.1", int(port), reuse_port=False)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    return HttpServer(runner=runner, port=bound)
