"""The web view's HTTP side: a Starlette app serving the page (``static/``, shipped in the
package) and the JSON API behind it, and :func:`serve` / :class:`ViewServer` to run it with
uvicorn on 127.0.0.1.

Routes (all ``GET``; errors are ``{"error": message}`` with 400 for a bad parameter and 404 for
a missing run, namespace or selection)::

    /                                        the page (runs, one run, router, selections)
    /api/runs?q&model&strategy&kind&status&since&until&limit&offset
    /api/facets                              the values the search form offers
    /api/runs/{id}                           one run whole (an id prefix is enough)
    /api/routes                              the router state: namespaces and their arms
    /api/routes/{namespace}                  one namespace with its decisions over time
    /api/routes/{namespace}/rewards.svg      its rewards over time
    /api/selections?limit&offset             the logged selection runs
    /api/selections/{id}                     one selection's combinations
    /api/selections/{id}/pareto.svg          its Pareto chart

Every response forbids inline script and foreign origins (Content-Security-Policy): answers are
model-written, so the page puts them in the DOM as text only, and the policy is a second wall.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from .._net import LOOPBACK_HOSTS, HostCheck, allowed_hosts, is_loopback, listening_socket
from ..errors import MissingExtraError, UserError, ViewNotFoundError
from ._data import ViewData

__all__ = [
    "DEFAULT_PORT",
    "LOOPBACK_HOSTS",
    "STATIC_DIR",
    "ViewServer",
    "create_app",
    "is_loopback",
    "serve",
]

STATIC_DIR = Path(__file__).parent / "static"
DEFAULT_PORT = 8765
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _starlette() -> Any:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("`phi view`", "server") from exc


def create_app(data: ViewData, *, hosts: Sequence[str] | None = LOOPBACK_HOSTS) -> Any:
    """The Starlette application over ``data`` (see the module docstring for its routes).

    ``hosts``: the host names a request may be addressed to (``None``: any). The loopback
    default refuses a foreign ``Host`` header, so a web page whose domain is re-pointed at
    127.0.0.1 (DNS rebinding) cannot read the log through the visitor's browser.
    """
    _starlette()
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    def api(
        read: Callable[[Request], Any], media_type: str | None = None
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                value = await run_in_threadpool(read, request)
            except ViewNotFoundError as exc:
                return JSONResponse({"error": str(exc)}, status_code=404)
            except UserError as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            if media_type is not None:
                return Response(value, media_type=media_type)
            return JSONResponse(value)

        return endpoint

    def params(request: Request) -> dict[str, str]:
        return dict(request.query_params)

    def path(request: Request, name: str) -> str:
        return str(request.path_params[name])

    async def page(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html")

    async def favicon(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")

    async def not_found(request: Request, exc: Exception) -> Response:
        return JSONResponse(
            {"error": f"No page {request.url.path!r}; the view starts at /."},
            status_code=404,
        )

    svg = "image/svg+xml"
    routes = [
        Route("/", page),
        Route("/favicon.ico", favicon),
        Route("/api/runs", api(lambda r: data.runs(params(r)))),
        Route("/api/facets", api(lambda r: data.facets())),
        Route("/api/runs/{run_id}", api(lambda r: data.run(path(r, "run_id")))),
        Route("/api/routes", api(lambda r: data.routes())),
        # a namespace may hold "/" (the client sends it as %2F, decoded before routing)
        Route(
            "/api/routes/{ns:path}/rewards.svg",
            api(lambda r: data.route_chart(path(r, "ns")), svg),
        ),
        Route("/api/routes/{ns:path}", api(lambda r: data.route(path(r, "ns")))),
        Route("/api/selections", api(lambda r: data.selections(params(r)))),
        Route("/api/selections/{run_id}", api(lambda r: data.selection(path(r, "run_id")))),
        Route(
            "/api/selections/{run_id}/pareto.svg",
            api(lambda r: data.pareto_chart(path(r, "run_id")), svg),
        ),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    middleware = [Middleware(_Headers)]
    if hosts is not None:
        middleware.insert(0, Middleware(HostCheck, hosts=hosts, body=lambda m: {"error": m}))
    return Starlette(routes=routes, middleware=middleware, exception_handlers={404: not_found})


class _Headers:
    """ASGI middleware giving every response the view's security headers (its static files
    too: ``/static/index.html`` is the whole view and must not be framed either)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.extra = [(k.lower().encode(), v.encode()) for k, v in _HEADERS.items()]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in self.extra if k not in have]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


class ViewServer:
    """The view served by uvicorn in a background thread (tests, notebooks); a context manager
    whose ``url`` is ready on entry and whose exit stops the server and joins the thread."""

    def __init__(self, data: ViewData, *, host: str = "127.0.0.1", port: int = 0) -> None:
        _starlette()
        import uvicorn

        self.data = data
        self._sock = listening_socket(host, port)
        self.url = _url(self._sock)
        config = uvicorn.Config(
            create_app(data, hosts=allowed_hosts(host)), log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> ViewServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
        self.data.close()


def serve(
    data: ViewData,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the view until interrupted; ``on_ready(url)`` is called once it listens."""
    _starlette()
    import uvicorn

    sock = listening_socket(host, port)
    try:
        if on_ready is not None:
            on_ready(_url(sock))
        config = uvicorn.Config(
            create_app(data, hosts=allowed_hosts(host)), log_level="warning", lifespan="off"
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        data.close()
