"""The MCP test server: a low-level `mcp.server.Server` over a `Catalog`.

List results are the catalog's raw dicts, injected by a `ServerMiddleware`
after the SDK has shaped a valid placeholder result, so deliberately broken
entries reach the wire exactly as stored (the SDK validates handler results
but passes middleware results through). Faults, pagination and the protocol
era policy live in the same middleware.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
from mcp import types
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.runner import serve_loop
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
)
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from testservers.catalog import KINDS, Catalog

__all__ = [
    "ERAS",
    "LIST_METHODS",
    "Notifier",
    "build_server",
    "changed_kinds",
    "decode_cursor",
    "encode_cursor",
    "page_of_request",
    "serve_streams",
]

logger = logging.getLogger(__name__)

ERAS: tuple[str, ...] = ("both", "legacy", "modern")
"""Accepted `era` values: serve both protocol eras, handshake only, 2026 only."""

LIST_METHODS: dict[str, str] = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
}
"""List method -> catalog kind (also the result's list key)."""

_EVENTS: dict[str, ServerEvent] = {
    "tools": ToolsListChanged(),
    "prompts": PromptsListChanged(),
    "resources": ResourcesListChanged(),
}
_NOTIFY_TIMEOUT = 2.0
_PLACEHOLDERS = {
    "tools/list": types.ListToolsResult(tools=[]),
    "prompts/list": types.ListPromptsResult(prompts=[]),
    "resources/list": types.ListResourcesResult(resources=[]),
}


def encode_cursor(kind: str, offset: int, generation: int) -> str:
    """An opaque cursor for the page of `kind` starting at `offset`."""
    raw = json.dumps({"k": kind, "o": offset, "g": generation}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: Any, kind: str) -> tuple[int, int]:
    """Return `(offset, generation)` from a cursor.

    Raises `ValueError` (or `TypeError` for a non-string) if it is not ours.
    """
    if not isinstance(cursor, str):
        raise TypeError("cursor must be a string")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, UnicodeError, ValueError) as exc:
        raise ValueError("malformed cursor") from exc
    if not isinstance(data, dict) or data.get("k") != kind:
        raise ValueError("cursor does not belong to this list")
    offset, generation = data.get("o"), data.get("g")
    if not isinstance(offset, int) or not isinstance(generation, int) or offset < 0:
        raise ValueError("malformed cursor")
    return offset, generation


def page_of_request(method: str, params: Any, page_size: int) -> int | None:
    """The 0-based page a list request asks for, or None if its cursor is not ours."""
    kind = LIST_METHODS[method]
    cursor = params.get("cursor") if isinstance(params, Mapping) else None
    if cursor is None:
        return 0
    try:
        offset, _ = decode_cursor(cursor, kind)
    except (ValueError, TypeError):
        return None
    return offset // page_size


def _placeholder_entry(kind: str, index: int) -> dict[str, Any]:
    if kind == "tools":
        return {
            "name": f"endless.placeholder_{index:06d}",
            "description": "Placeholder served past the end of the catalog.",
            "inputSchema": {"type": "object"},
        }
    if kind == "prompts":
        return {"name": f"endless.placeholder_{index:06d}"}
    return {"uri": f"file:///endless/{index:06d}.txt", "name": f"endless_{index:06d}"}


class Notifier:
    """Sends list_changed notifications to every connected client, in both eras.

    Handshake-era sessions are collected by the server middleware as requests
    arrive; 2026-era clients receive events through `subscriptions/listen`
    streams fed by `bus`. Call `notify` from the server's event loop.
    """

    def __init__(self, bus: InMemorySubscriptionBus) -> None:
        self.bus = bus
        self._sessions: dict[int, ServerSession] = {}

    @property
    def session_count(self) -> int:
        """Number of live handshake-era connections being tracked."""
        return len(self._sessions)

    def track(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Remember the connection behind a handshake-era request."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        # The SDK exposes the connection only through the session; one
        # ServerSession is built per request, so key by the connection.
        connection = getattr(ctx.session, "_connection", None)
        key = id(connection if connection is not None else ctx.session)
        if key in self._sessions:
            return
        self._sessions[key] = ctx.session
        exit_stack = getattr(connection, "exit_stack", None)
        if exit_stack is not None:
            exit_stack.callback(self._sessions.pop, key, None)

    async def notify(self, kinds: Iterable[str] = ("tools",)) -> dict[str, int]:
        """Send one list_changed per kind to every client; safe with none connected."""
        wanted = [k for k in kinds if k in _EVENTS]
        delivered = 0
        for key, session in list(self._sessions.items()):
            try:
                with anyio.fail_after(_NOTIFY_TIMEOUT):
                    for kind in wanted:
                        await _send_list_changed(session, kind)
                delivered += 1
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, TimeoutError):
                self._sessions.pop(key, None)
            except Exception:  # a dead transport can fail in many ways; drop it
                logger.debug(
                    "dropping session after failed notification", exc_info=True
                )
                self._sessions.pop(key, None)
        for kind in wanted:
            await self.bus.publish(_EVENTS[kind])
        return {"sessions": delivered}


async def _send_list_changed(session: ServerSession, kind: str) -> None:
    if kind == "tools":
        await session.send_tool_list_changed()
    elif kind == "prompts":
        await session.send_prompt_list_changed()
    else:
        await session.send_resource_list_changed()


class _CatalogServer(Server[Any]):
    """A `Server` whose default initialization options advertise `listChanged`."""

    notification_options: NotificationOptions = NotificationOptions()

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        # The Streamable HTTP manager calls this with no arguments, so the
        # server itself must carry the notification options.
        return super().create_initialization_options(
            notification_options or self.notification_options,
            experimental_capabilities,
            extensions,
        )


class _CatalogMiddleware:
    """Era policy, session tracking, raw list injection, pagination and faults."""

    def __init__(
        self, catalog: Catalog, page_size: int, era: str, notifier: Notifier
    ) -> None:
        self.catalog = catalog
        self.page_size = page_size
        self.era = era
        self.notifier = notifier

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        self._enforce_era(ctx)
        result = await call_next(ctx)
        self.notifier.track(ctx)
        if ctx.request_id is not None and ctx.method in LIST_METHODS:
            return await self._list(ctx.method, ctx.params, result)
        return result

    def _enforce_era(self, ctx: ServerRequestContext[Any, Any]) -> None:
        if ctx.request_id is None:
            return
        if self.era == "modern" and ctx.method == "initialize":
            requested = (ctx.params or {}).get("protocolVersion")
            data: dict[str, Any] = {"supported": list(MODERN_PROTOCOL_VERSIONS)}
            if isinstance(requested, str):
                data["requested"] = requested
            raise MCPError(
                types.UNSUPPORTED_PROTOCOL_VERSION,
                "this server speaks only the 2026-07-28 protocol; use server/discover",
                data=data,
            )
        if self.era == "legacy" and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            if ctx.method == "server/discover":
                raise MCPError(
                    types.METHOD_NOT_FOUND, "Method not found", data=ctx.method
                )
            raise MCPError(
                types.UNSUPPORTED_PROTOCOL_VERSION,
                "this server speaks only the initialize handshake",
                data={"supported": list(HANDSHAKE_PROTOCOL_VERSIONS)},
            )

    async def _list(
        self, method: str, params: Mapping[str, Any] | None, result: HandlerResult
    ) -> HandlerResult:
        kind = LIST_METHODS[method]
        catalog = self.catalog
        size = self.page_size
        cursor = (params or {}).get("cursor")
        offset = 0
        if cursor is not None:
            try:
                offset, cursor_generation = decode_cursor(cursor, kind)
            except (ValueError, TypeError) as exc:
                problem: str | None = f"invalid cursor: {exc}"
            else:
                problem = None
                if cursor_generation != catalog.generation:
                    problem = "stale cursor: the catalog changed; restart from page one"
            if problem is None and catalog.take_fault(
                ("stale_cursor_once",), method, offset // size
            ):
                problem = "stale cursor; restart from the first page"
            if problem is not None:
                raise MCPError(types.INVALID_PARAMS, problem)
        page = offset // size
        if catalog.take_fault(("jsonrpc_error",), method, page):
            raise MCPError(types.INTERNAL_ERROR, f"injected error on page {page}")
        delay = catalog.take_fault(("timeout", "slow"), method, page)
        if delay and delay["seconds"]:
            await anyio.sleep(delay["seconds"])
        items, total, generation = catalog.page(kind, offset, size)
        next_cursor = (
            encode_cursor(kind, offset + size, generation)
            if offset + size < total
            else None
        )
        if catalog.take_fault(("endless",), method, page):
            if offset >= total:
                items = [_placeholder_entry(kind, offset + i) for i in range(size)]
            next_cursor = encode_cursor(kind, offset + size, generation)
        if catalog.take_fault(("cursor_loop",), method, page):
            # Revisit a cursor the client has already been given (page 0's
            # nextCursor), or page 0 itself when looping from page 0.
            back = size if page > 0 else 0
            next_cursor = encode_cursor(kind, back, generation)
        out = dict(result) if isinstance(result, dict) else {}
        out[kind] = items
        if next_cursor is None:
            out.pop("nextCursor", None)
        else:
            out["nextCursor"] = next_cursor
        return out


def build_server(
    catalog: Catalog,
    *,
    page_size: int = 100,
    era: str = "both",
    notify_capable: bool = True,
) -> tuple[Server[Any], Notifier]:
    """Build the MCP server over `catalog` and the `Notifier` that broadcasts changes.

    `notify_capable=False` advertises `listChanged: false` and serves no
    `subscriptions/listen` (2026-era clients cannot listen), but handshake-era
    sessions still receive notifications, as real SDK servers do.
    """
    if era not in ERAS:
        raise ValueError(f"era must be one of {ERAS}")
    if page_size < 1:
        raise ValueError("page_size must be positive")
    bus = InMemorySubscriptionBus()
    notifier = Notifier(bus)

    async def list_placeholder(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> Any:
        return _PLACEHOLDERS[ctx.method]

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if catalog.find_tool(params.name) is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        text = json.dumps(params.arguments or {}, sort_keys=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name not in catalog.names("prompts"):
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        text = f"{params.name}: {json.dumps(params.arguments or {}, sort_keys=True)}"
        return types.GetPromptResult(
            messages=[
                types.PromptMessage(
                    role="user", content=types.TextContent(type="text", text=text)
                )
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri not in catalog.names("resources"):
            raise MCPError(types.INVALID_PARAMS, f"Unknown resource: {uri}")
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=uri, mime_type="text/plain", text=uri)
            ]
        )

    def input_schema(name: str) -> Mapping[str, Any] | None:
        # Answering from the catalog keeps the SDK's 2026 header validation
        # from walking tools/list (and tripping armed faults) on tools/call.
        tool = catalog.find_tool(name)
        schema = tool.get("inputSchema") if tool else None
        return schema if isinstance(schema, dict) else None

    server = _CatalogServer(
        "toolsync-testserver",
        version="1.0.0",
        instructions="Toolsync MCP test server.",
        get_tool_input_schema=input_schema,
        on_list_tools=list_placeholder,
        on_call_tool=call_tool,
        on_list_prompts=list_placeholder,
        on_get_prompt=get_prompt,
        on_list_resources=list_placeholder,
        on_read_resource=read_resource,
        on_subscriptions_listen=ListenHandler(bus) if notify_capable else None,
    )
    server.notification_options = NotificationOptions(
        prompts_changed=notify_capable,
        resources_changed=notify_capable,
        tools_changed=notify_capable,
    )
    server.middleware.append(_CatalogMiddleware(catalog, page_size, era, notifier))
    return server, notifier


async def serve_streams(
    server: Server[Any],
    read_stream: Any,
    write_stream: Any,
    *,
    era: str = "both",
) -> None:
    """Serve one duplex connection (stdio, SSE) in the requested era.

    The SDK's duplex loop locks a connection to the era of its first request,
    so a `server/discover` probe would lock a legacy-only server into the
    2026 era; for `era="legacy"` the handshake-only loop is used instead.
    """
    if era != "legacy":
        await server.run(
            read_stream, write_stream, server.create_initialization_options()
        )
        return
    async with server.lifespan(server) as lifespan_state:
        await serve_loop(
            server,
            read_stream,
            write_stream,
            lifespan_state=lifespan_state,
            init_options=server.create_initialization_options(),
        )


def changed_kinds(
    before: Catalog | dict[str, Any], after: Catalog | dict[str, Any]
) -> list[str]:
    """The kinds whose entries differ between two catalogs or snapshots."""

    def entries(source: Catalog | dict[str, Any], kind: str) -> list[Any]:
        return (
            source.entries(kind)
            if isinstance(source, Catalog)
            else list(source.get(kind) or [])
        )

    return [k for k in KINDS if entries(before, k) != entries(after, k)]
