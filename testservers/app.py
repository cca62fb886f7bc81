"""Processes around the test server: the HTTP app (MCP + control API) and stdio.

HTTP: one Starlette app with Streamable HTTP at `/mcp`, the SSE transport at
`/sse` + `/messages/`, and a JSON control API under `/control/`. stdio: the
same MCP server over stdin/stdout, its catalog following a state file.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import uvicorn
from mcp.server.sse import SseServerTransport
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from testservers.catalog import (
    HTTP_FAULT_KINDS,
    KINDS,
    Catalog,
    atomic_write_text,
    generate_prompts,
    generate_resources,
    generate_tools,
)
from testservers.server import (
    LIST_METHODS,
    Notifier,
    build_server,
    changed_kinds,
    page_of_request,
    serve_streams,
)

__all__ = [
    "ServerOptions",
    "create_app",
    "load_or_generate",
    "run_http",
    "run_stdio",
]

logger = logging.getLogger(__name__)

_SEEN_AUTH_LIMIT = 1000
_POLL_INTERVAL = 0.1
_BIND_RETRY_SECONDS = 5.0
_GARBAGE_BODY = b"\x00\x01garbage{{{ this is not JSON"
_HTML_BODY = (
    b"<!doctype html><html><head><title>502 Bad Gateway</title></head>"
    b"<body><h1>Bad Gateway</h1><p>The upstream server is unavailable.</p>"
    b"</body></html>"
)


@dataclass
class ServerOptions:
    """Settings shared by the HTTP and stdio processes."""

    page_size: int = 100
    era: str = "both"
    notify_capable: bool = True
    require_bearer: str | None = None
    require_header: tuple[str, str] | None = None
    state_file: Path | None = None
    mutate_every: float | None = None
    notify_on_mutate: bool = False


def load_or_generate(
    state_file: Path | None,
    *,
    tools: int = 10,
    prompts: int = 0,
    resources: int = 0,
    seed: int = 0,
) -> Catalog:
    """The catalog stored in `state_file` if it exists, else a generated one."""
    if state_file is not None and state_file.exists():
        return Catalog.from_file(state_file)
    return Catalog(
        generate_tools(tools, seed),
        generate_prompts(prompts, seed),
        generate_resources(resources, seed),
    )


class _AppState:
    """Shared state of one HTTP server process."""

    def __init__(self, catalog: Catalog, notifier: Notifier, options: ServerOptions):
        self.catalog = catalog
        self.notifier = notifier
        self.options = options
        self.seen_auth: list[dict[str, Any]] = []

    def record(self, scope: Scope, headers: dict[str, str]) -> None:
        chosen = {
            name: value
            for name, value in headers.items()
            if name.startswith("x-") or name == self._header_name()
        }
        self.seen_auth.append(
            {
                "path": scope["path"],
                "method": scope["method"],
                "authorization": headers.get("authorization"),
                "headers": chosen,
            }
        )
        del self.seen_auth[:-_SEEN_AUTH_LIMIT]

    def _header_name(self) -> str | None:
        required = self.options.require_header
        return required[0].lower() if required else None

    def authorized(self, headers: dict[str, str]) -> bool:
        token = self.options.require_bearer
        if token is not None and headers.get("authorization") != f"Bearer {token}":
            return False
        required = self.options.require_header
        return required is None or headers.get(required[0].lower()) == required[1]

    async def notify(self, kinds: list[str], count: int = 1) -> dict[str, int]:
        result = {"sessions": 0}
        for _ in range(count):
            result = await self.notifier.notify(kinds)
        return result

    async def after_change(self, kinds: list[str]) -> None:
        if self.options.notify_on_mutate and kinds:
            await self.notify(kinds)

    def summary(self) -> dict[str, Any]:
        catalog = self.catalog
        return {
            "generation": catalog.generation,
            "counts": catalog.counts(),
            "names": catalog.names("tools"),
            "prompt_names": catalog.names("prompts"),
            "resource_uris": catalog.names("resources"),
            "faults": catalog.faults,
            "sessions": self.notifier.session_count,
            "pid": os.getpid(),
        }


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class _McpGate:
    """ASGI front of the MCP endpoints: records auth, enforces it, injects HTTP faults."""

    def __init__(self, app: ASGIApp, state: _AppState, *, faults: bool) -> None:
        self.app = app
        self.state = state
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1")
            for k, v in scope["headers"]
        }
        self.state.record(scope, headers)
        if not self.state.authorized(headers):
            response = JSONResponse(
                {"error": "unauthorized"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="toolsync-testserver"'},
            )
            await response(scope, receive, send)
            return
        catalog = self.state.catalog
        if (
            self.faults
            and scope["method"] == "POST"
            and catalog.has_faults(HTTP_FAULT_KINDS)
        ):
            body = await _read_body(receive)
            response = self._http_fault(body)
            if response is not None:
                await response(scope, receive, send)
                return
            receive = _replaying(body, receive)
        await self.app(scope, receive, send)

    def _http_fault(self, body: bytes) -> Response | None:
        try:
            message = json.loads(body)
        except ValueError:
            return None
        if not isinstance(message, dict) or message.get("method") not in LIST_METHODS:
            return None
        method = message["method"]
        page = page_of_request(
            method, message.get("params"), self.state.options.page_size
        )
        fault = self.state.catalog.take_fault(sorted(HTTP_FAULT_KINDS), method, page)
        if fault is None:
            return None
        if fault["kind"] == "http_500":
            return Response(
                b"Internal Server Error (injected)", 500, media_type="text/plain"
            )
        if fault["kind"] == "garbage":
            return Response(_GARBAGE_BODY, 200, media_type="application/json")
        return Response(_HTML_BODY, 200, media_type="text/html")


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise TypeError("request body must be a JSON object")
    return data


def _control_routes(state: _AppState) -> list[Route]:
    catalog = state.catalog
    Handler = Callable[[dict[str, Any]], Awaitable[Any]]

    def post(path: str, handler: Handler) -> Route:
        async def endpoint(request: Request) -> Response:
            try:
                body = await _json_body(request)
                result = await handler(body)
            except (ValueError, TypeError, KeyError) as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            return JSONResponse(result)

        return Route(path, endpoint, methods=["POST"])

    def entries(body: dict[str, Any], key: str) -> list[Any]:
        value = body.get(key)
        if not isinstance(value, list):
            raise TypeError(f"{key!r} must be a list")
        return value

    async def set_kind(kind: str, body: dict[str, Any]) -> Any:
        catalog.set_entries(kind, entries(body, kind))
        await state.after_change([kind])
        return state.summary()

    async def add_tools(body: dict[str, Any]) -> Any:
        catalog.add_tools(entries(body, "tools"))
        await state.after_change(["tools"])
        return state.summary()

    async def remove_tools(body: dict[str, Any]) -> Any:
        removed = catalog.remove_tools(entries(body, "names"))
        await state.after_change(["tools"] if removed else [])
        return {"removed": removed, **state.summary()}

    async def mutate(body: dict[str, Any]) -> Any:
        kind = body.get("kind", "tools")
        shares = {k: float(body[k]) for k in ("change", "add", "remove") if k in body}
        seed = body.get("seed")
        result = catalog.mutate(**shares, seed=seed, kind=kind)
        await state.after_change([kind])
        return {**result, "generation": catalog.generation}

    async def fault(body: dict[str, Any]) -> Any:
        return {"fault": catalog.set_fault(body), "faults": catalog.faults}

    async def clear_faults(body: dict[str, Any]) -> Any:
        catalog.clear_faults(body.get("kind"))
        return {"faults": catalog.faults}

    async def notify(body: dict[str, Any]) -> Any:
        kinds = body.get("kinds", ["tools"])
        if not isinstance(kinds, list) or not set(kinds) <= set(KINDS):
            raise ValueError(f"kinds must be a list drawn from {list(KINDS)}")
        return await state.notify(kinds, int(body.get("count", 1)))

    async def clear_seen_auth(body: dict[str, Any]) -> Any:
        state.seen_auth.clear()
        return {"ok": True}

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "pid": os.getpid()})

    async def get_state(request: Request) -> Response:
        return JSONResponse(state.summary())

    async def snapshot(request: Request) -> Response:
        return JSONResponse(catalog.snapshot())

    async def seen_auth(request: Request) -> Response:
        return JSONResponse(list(state.seen_auth))

    def set_route(kind: str) -> Route:
        async def handler(body: dict[str, Any]) -> Any:
            return await set_kind(kind, body)

        return post(f"/control/set_{kind}", handler)

    return [
        Route("/control/health", health, methods=["GET"]),
        Route("/control/state", get_state, methods=["GET"]),
        Route("/control/snapshot", snapshot, methods=["GET"]),
        Route("/control/seen_auth", seen_auth, methods=["GET"]),
        *(set_route(kind) for kind in KINDS),
        post("/control/add_tools", add_tools),
        post("/control/remove_tools", remove_tools),
        post("/control/mutate", mutate),
        post("/control/fault", fault),
        post("/control/clear_faults", clear_faults),
        post("/control/notify", notify),
        post("/control/clear_seen_auth", clear_seen_auth),
    ]


def _security() -> TransportSecuritySettings:
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
    )


def create_app(catalog: Catalog, options: ServerOptions) -> Starlette:
    """The Starlette app: `/mcp`, `/sse` + `/messages/`, and `/control/*`."""
    server, notifier = build_server(
        catalog,
        page_size=options.page_size,
        era=options.era,
        notify_capable=options.notify_capable,
    )
    state = _AppState(catalog, notifier, options)
    # Called for its side effect: it creates the session manager we mount.
    server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    session_manager = server.session_manager
    sse = SseServerTransport("/messages/", security_settings=_security())

    async def sse_app(scope: Scope, receive: Receive, send: Send) -> None:
        async with sse.connect_sse(scope, receive, send) as (read_stream, write_stream):
            await serve_streams(server, read_stream, write_stream, era=options.era)

    async def mutate_loop(interval: float) -> None:
        while True:
            await anyio.sleep(interval)
            catalog.mutate()
            await state.after_change(["tools"])

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            if options.mutate_every:
                tg.start_soon(mutate_loop, options.mutate_every)
            async with session_manager.run():
                yield
            tg.cancel_scope.cancel()

    routes: list[Route | Mount] = [
        Route(
            "/mcp", _McpGate(StreamableHTTPASGIApp(session_manager), state, faults=True)
        ),
        Route("/sse", _McpGate(sse_app, state, faults=False), methods=["GET"]),
        Mount("/messages/", app=_McpGate(sse.handle_post_message, state, faults=False)),
        *_control_routes(state),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.testserver = state
    return app


def _bind(port: int) -> socket.socket:
    # A restarted server wants its old port back; the killed process's
    # socket may linger briefly, so retry instead of failing at once.
    deadline = time.monotonic() + _BIND_RETRY_SECONDS
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        sock.set_inheritable(True)
        return sock


class _PromptExitServer(uvicorn.Server):
    """uvicorn server that exits at once on SIGTERM/SIGINT.

    uvicorn's graceful shutdown waits for open SSE streams, which test
    clients keep open indefinitely; every change is already on disk.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        logging.shutdown()
        os._exit(0)


def run_http(
    catalog: Catalog,
    options: ServerOptions,
    *,
    port: int = 0,
    ready_file: Path | None = None,
) -> None:
    """Serve the HTTP app on 127.0.0.1 until killed."""
    if options.state_file is not None:
        catalog.autosave(options.state_file)
    sock = _bind(port)
    actual_port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(catalog, options),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=1,
    )
    server = _PromptExitServer(config)

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.01)
        if ready_file is not None:
            info = {"port": actual_port, "pid": os.getpid()}
            atomic_write_text(ready_file, json.dumps(info))
        print(f"READY http://127.0.0.1:{actual_port}/mcp", flush=True)

    async def main() -> None:
        announcer = asyncio.create_task(announce())
        try:
            await server.serve(sockets=[sock])
        finally:
            announcer.cancel()

    asyncio.run(main())


def _file_signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_ino, st.st_size


class _StateFileFollower:
    """Keeps a stdio server's catalog in step with its state file."""

    def __init__(self, catalog: Catalog, notifier: Notifier, path: Path) -> None:
        self.catalog = catalog
        self.notifier = notifier
        self.path = path
        self.signature = _file_signature(path)
        data = self._read() if self.signature is not None else None
        self.file_faults = (data or {}).get("faults") or {}
        self.notify_seq = ((data or {}).get("notify") or {}).get("seq")

    def _read(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    async def run(self) -> None:
        while True:
            await anyio.sleep(_POLL_INTERVAL)
            signature = _file_signature(self.path)
            if signature is None or signature == self.signature:
                continue
            data = self._read()
            if data is None:
                continue  # a writer not using atomic replace; retry next tick
            self.signature = signature
            await self._apply(data)

    async def _apply(self, data: dict[str, Any]) -> None:
        faults = data.get("faults") or {}
        if faults == self.file_faults:
            # Unchanged in the file: keep the in-memory faults so fired
            # `times` budgets are not re-armed by an unrelated edit.
            data = {**data, "faults": self.catalog.faults}
        self.file_faults = faults
        kinds = changed_kinds(self.catalog, data)
        try:
            self.catalog.load(data)
        except (ValueError, TypeError):
            logger.warning("ignoring malformed state file %s", self.path, exc_info=True)
            return
        if kinds:
            await self.notifier.notify(kinds)
        request = data.get("notify") or {}
        if request.get("seq") is not None and request.get("seq") != self.notify_seq:
            self.notify_seq = request.get("seq")
            for _ in range(int(request.get("count", 1))):
                await self.notifier.notify(request.get("kinds") or ["tools"])


def run_stdio(catalog: Catalog, options: ServerOptions) -> None:
    """Serve the MCP server over stdin/stdout until stdin closes."""
    server, notifier = build_server(
        catalog,
        page_size=options.page_size,
        era=options.era,
        notify_capable=options.notify_capable,
    )

    async def main() -> None:
        async with (
            stdio_server() as (read_stream, write_stream),
            anyio.create_task_group() as tg,
        ):
            if options.state_file is not None:
                follower = _StateFileFollower(catalog, notifier, options.state_file)
                tg.start_soon(follower.run)
            await serve_streams(server, read_stream, write_stream, era=options.era)
            tg.cancel_scope.cancel()

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    anyio.run(main)
    sys.stderr.flush()
