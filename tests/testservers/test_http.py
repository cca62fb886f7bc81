"""Streamable HTTP: pagination, eras, raw entries, mutation, persistence, auth."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import pydantic
import pytest
from mcp import Client, MCPError, types
from mcp.client.streamable_http import streamable_http_client

from testservers.harness import TestServer

from .helpers import MODERN, http_status, raw_legacy, raw_modern, walk

pytestmark = pytest.mark.anyio

Factory = Callable[..., TestServer]


def _flatten(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [e for sub in exc.exceptions for e in _flatten(sub)]
    return [exc]


async def test_pagination_follows_next_cursor_to_the_end(
    mcp_server_factory: Factory,
) -> None:
    server = mcp_server_factory(tools=1000, page_size=100)
    async with Client(server.url) as client:
        tools, pages = await walk(client)
    assert pages == 10
    assert [t.name for t in tools] == server.state()["names"]
    assert len({t.name for t in tools}) == 1000


async def test_empty_catalog_lists_nothing(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(tools=0)
    async with Client(server.url) as client:
        result = await client.list_tools(cache_mode="bypass")
    assert result.tools == [] and result.next_cursor is None


@pytest.mark.parametrize(
    ("era", "mode", "expected"),
    [
        ("both", "auto", MODERN),
        ("both", "legacy", "2025-11-25"),
        ("legacy", "auto", "2025-11-25"),
        ("legacy", "legacy", "2025-11-25"),
        ("modern", "auto", MODERN),
        ("modern", MODERN, MODERN),
    ],
)
async def test_eras(
    mcp_server_factory: Factory, era: str, mode: str, expected: str
) -> None:
    server = mcp_server_factory(tools=30, page_size=10, era=era)
    async with Client(server.url, mode=mode) as client:
        assert client.protocol_version == expected
        if mode != MODERN:  # a pinned version synthesizes empty capabilities
            assert client.server_capabilities.tools is not None
            assert client.server_capabilities.tools.list_changed is True
        tools, pages = await walk(client)
        assert (len(tools), pages) == (30, 3)
        called = await client.call_tool(tools[0].name, {"q": "hi"})
        assert isinstance(called.content[0], types.TextContent)
        assert called.content[0].text == '{"q": "hi"}'


async def test_modern_only_refuses_the_handshake(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(era="modern")
    with pytest.raises(BaseException) as info:  # wrapped in exception groups
        async with Client(server.url, mode="legacy"):
            pass
    errors = [e for e in _flatten(info.value) if isinstance(e, MCPError)]
    assert errors and errors[0].error.code == types.UNSUPPORTED_PROTOCOL_VERSION
    assert errors[0].error.data["supported"] == [MODERN]


async def test_legacy_only_answers_discover_with_method_not_found(
    mcp_server_factory: Factory,
) -> None:
    server = mcp_server_factory(era="legacy")
    response = raw_modern(server.url, "server/discover")
    assert response["error"]["code"] == types.METHOD_NOT_FOUND


async def test_no_list_changed_capability(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(notify_capable=False)
    for mode in ("legacy", "auto"):
        async with Client(server.url, mode=mode) as client:
            assert client.server_capabilities.tools is not None
            assert not client.server_capabilities.tools.list_changed


async def test_garbage_and_stale_cursors_answer_invalid_params(
    mcp_server_factory: Factory,
) -> None:
    server = mcp_server_factory(tools=30, page_size=10)
    async with Client(server.url) as client:
        with pytest.raises(MCPError) as info:
            await client.list_tools(cursor="not-a-cursor", cache_mode="bypass")
        assert info.value.error.code == types.INVALID_PARAMS
        first = await client.list_tools(cache_mode="bypass")
        server.mutate(seed=1)
        with pytest.raises(MCPError) as info:
            await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
        assert info.value.error.code == types.INVALID_PARAMS
        assert "stale" in info.value.error.message
        tools, _ = await walk(client)  # restarting from page one works
        assert len(tools) == len(server.state()["names"])


BROKEN_TOOLS: list[Any] = [
    {"name": "no_schema", "description": "missing inputSchema"},
    {"name": "string_root", "inputSchema": {"type": "string"}},
    {"name": 42, "inputSchema": {"type": "object"}},
    {"name": "nul\u0000char", "inputSchema": {"type": "object"}},
    {"name": "huge", "description": "x" * 1_000_000, "inputSchema": {"type": "object"}},
    {"name": "dup", "inputSchema": {"type": "object"}},
    {"name": "dup", "inputSchema": {"type": "object"}, "title": "second"},
    {"name": "bad name with spaces/and/slashes!", "inputSchema": {"type": "object"}},
    "not even an object",
]


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_raw_invalid_entries_reach_the_wire(
    mcp_server_factory: Factory, era: str
) -> None:
    server = mcp_server_factory(tools=0)
    server.set_tools(BROKEN_TOOLS)
    raw = raw_modern if era == "modern" else raw_legacy
    response = raw(server.url, "tools/list")
    assert response["result"]["tools"] == BROKEN_TOOLS
    assert "nextCursor" not in response["result"]


async def test_sdk_client_rejects_the_invalid_page(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(tools=3)
    server.add_tools([{"name": "no_schema"}])
    async with Client(server.url) as client:
        with pytest.raises(pydantic.ValidationError):
            await client.list_tools(cache_mode="bypass")


async def test_raw_prompts_and_resources(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(prompts=3, resources=4)
    async with Client(server.url) as client:
        prompts = await client.list_prompts(cache_mode="bypass")
        resources = await client.list_resources(cache_mode="bypass")
    assert [p.name for p in prompts.prompts] == server.state()["prompt_names"]
    assert [str(r.uri) for r in resources.resources] == server.state()["resource_uris"]
    server.set_prompts([{"title": "nameless"}])
    server.set_resources([{"name": "no uri"}])
    assert raw_modern(server.url, "prompts/list")["result"]["prompts"] == [
        {"title": "nameless"}
    ]
    assert raw_modern(server.url, "resources/list")["result"]["resources"] == [
        {"name": "no uri"}
    ]


async def test_mutation_changes_the_listing(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(tools=200, page_size=50)
    async with Client(server.url) as client:
        before = {t.name: t for t in (await walk(client))[0]}
        result = server.mutate(change=0.1, add=0.05, remove=0.05, seed=11)
        after = {t.name: t for t in (await walk(client))[0]}
    assert set(result["removed"]).isdisjoint(after)
    assert set(result["added"]) <= set(after)
    assert all(before[n] != after[n] for n in result["changed"])
    server.remove_tools(list(after)[:10])
    assert len(server.state()["names"]) == len(after) - 10


async def test_state_survives_kill_and_restart(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(tools=50)
    server.mutate(seed=5)
    server.add_tools([{"name": "survivor", "inputSchema": {"type": "object"}}])
    expected = server.state()
    pid, port = server.pid, server.port
    server.kill()
    assert not server.running
    server.restart()
    assert (server.port, server.pid != pid) == (port, True)
    state = server.state()
    assert (state["names"], state["generation"]) == (
        expected["names"],
        expected["generation"],
    )
    async with Client(server.url) as client:
        tools, _ = await walk(client)
    assert [t.name for t in tools] == expected["names"]


async def test_bearer_token_required(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(require_bearer="s3cret")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert http_status(server.url, ping) == 401
    assert http_status(server.url, ping, {"Authorization": "Bearer wrong"}) == 401
    with pytest.raises(BaseException):  # noqa: B017 - wrapped in groups
        async with Client(server.url):
            pass
    headers = {"Authorization": "Bearer s3cret"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(server.url, http_client=http)) as client,
    ):
        tools, _ = await walk(client)
    assert len(tools) == 10
    seen = [entry["authorization"] for entry in server.seen_auth()]
    assert None in seen and "Bearer wrong" in seen and "Bearer s3cret" in seen
    assert server.state()["counts"]["tools"] == 10  # control API needs no token


async def test_required_header(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(require_header=("X-Api-Key", "k1"))
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert http_status(server.url, ping) == 401
    async with (
        httpx2.AsyncClient(headers={"X-Api-Key": "k1"}) as http,
        Client(streamable_http_client(server.url, http_client=http)) as client,
    ):
        await client.list_tools(cache_mode="bypass")
    assert {"x-api-key": "k1"} in [entry["headers"] for entry in server.seen_auth()]
