"""Client-side helpers shared by the test-server tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import anyio
from mcp import Client, types

MODERN = "2026-07-28"


async def walk(client: Client, *, limit: int = 50) -> tuple[list[types.Tool], int]:
    """Follow nextCursor to the end; returns (tools, pages). Fails past `limit` pages."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for pages in range(1, limit + 1):
        result = await client.list_tools(cursor=cursor, cache_mode="bypass")
        tools.extend(result.tools)
        cursor = result.next_cursor
        if cursor is None:
            return tools, pages
    raise AssertionError(f"pagination did not end within {limit} pages")


def _post(
    url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, str, str, dict[str, str]]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return (
                resp.status,
                resp.headers.get("Content-Type", ""),
                resp.read().decode(),
                dict(resp.headers),
            )
    except urllib.error.HTTPError as exc:
        return (
            exc.code,
            exc.headers.get("Content-Type", ""),
            exc.read().decode(),
            dict(exc.headers),
        )


def _decode(content_type: str, text: str) -> dict[str, Any]:
    if content_type.startswith("text/event-stream"):
        for line in text.splitlines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if "id" in message:
                    return message
        raise AssertionError(f"no response in SSE body: {text[:200]!r}")
    return json.loads(text)


def raw_modern(
    url: str, method: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One raw 2026-07-28 JSON-RPC request; returns the decoded JSON-RPC response."""
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {**(params or {}), "_meta": envelope},
    }
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    _, content_type, text, _ = _post(url, body, headers)
    return _decode(content_type, text)


def raw_legacy(
    url: str, method: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Handshake, then one raw handshake-era request; returns its JSON-RPC response."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    status, _, _, headers = _post(url, init, {})
    assert status == 200, status
    session = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
    common = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, common)
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    _, content_type, text, _ = _post(url, body, common)
    return _decode(content_type, text)


def http_status(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> int:
    """The HTTP status a raw POST gets."""
    return _post(url, body, headers or {})[0]


async def until(
    event: anyio.Event, trigger: Callable[[], Any], *, timeout: float = 15.0
) -> None:
    """Call blocking `trigger` (in a thread) until `event` is set.

    Handshake-era notifications ride a GET stream the client opens in the
    background, so the first ones may be sent before anyone listens.
    """
    with anyio.fail_after(timeout):
        while not event.is_set():
            await anyio.to_thread.run_sync(trigger)
            with anyio.move_on_after(0.25):
                await event.wait()
