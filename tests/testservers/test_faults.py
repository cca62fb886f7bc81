"""Every fault kind, observed from an SDK client over Streamable HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from mcp import Client, MCPError, types

from testservers.harness import TestServer

from .helpers import walk

pytestmark = pytest.mark.anyio

Factory = Callable[..., TestServer]
MODES = ["legacy", "auto"]


@pytest.fixture
def server(mcp_server_factory: Factory) -> TestServer:
    return mcp_server_factory(tools=50, page_size=10)


async def _second_page_error(server: TestServer, mode: str, **kw: float) -> MCPError:
    async with Client(server.url, mode=mode, **kw) as client:
        first = await client.list_tools(cache_mode="bypass")
        with pytest.raises(MCPError) as info:
            await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
        # The connection survives the failed page.
        assert len((await client.list_tools(cache_mode="bypass")).tools) == 10
    return info.value


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("jsonrpc_error", types.INTERNAL_ERROR),
        ("http_500", types.INTERNAL_ERROR),
        ("garbage", types.PARSE_ERROR),
        ("html", types.INVALID_REQUEST),
    ],
)
async def test_error_faults_fail_only_their_page(
    server: TestServer, mode: str, kind: str, code: int
) -> None:
    server.fault(kind, page=1)
    error = await _second_page_error(server, mode)
    assert error.error.code == code
    server.clear_faults()
    async with Client(server.url, mode=mode) as client:
        assert len((await walk(client))[0]) == 50


async def test_http_500_is_a_real_status(server: TestServer) -> None:
    from .helpers import http_status

    server.fault("http_500", page=0)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    assert http_status(server.url, body) == 500


async def test_fault_times_budget(server: TestServer) -> None:
    server.fault("jsonrpc_error", page=None, times=2)
    async with Client(server.url) as client:
        for _ in range(2):
            with pytest.raises(MCPError):
                await client.list_tools(cache_mode="bypass")
        assert len((await walk(client))[0]) == 50
    assert server.state()["faults"] == {}


@pytest.mark.parametrize("mode", MODES)
async def test_timeout(server: TestServer, mode: str) -> None:
    server.fault("timeout", page=1, seconds=30)
    error = await _second_page_error(server, mode, read_timeout_seconds=0.5)
    assert error.error.code == types.REQUEST_TIMEOUT


async def test_slow_page_still_answers(server: TestServer) -> None:
    server.fault("slow", page=2, seconds=0.3)
    async with Client(server.url) as client:
        first = await client.list_tools(cache_mode="bypass")
        second = await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
        started = time.monotonic()
        third = await client.list_tools(cursor=second.next_cursor, cache_mode="bypass")
        waited = time.monotonic() - started
    assert len(third.tools) == 10
    assert waited >= 0.25  # it did sleep before answering


@pytest.mark.parametrize("mode", MODES)
async def test_cursor_loop(server: TestServer, mode: str) -> None:
    server.fault("cursor_loop", page=3)
    seen: list[str] = []
    async with Client(server.url, mode=mode) as client:
        cursor = None
        for _ in range(4):
            result = await client.list_tools(cursor=cursor, cache_mode="bypass")
            cursor = result.next_cursor
            assert cursor is not None
            seen.append(cursor)
    assert seen[3] == seen[0]  # page 3 points back to the cursor page 0 gave out


async def test_cursor_loop_on_page_zero_repeats_page_zero(server: TestServer) -> None:
    server.fault("cursor_loop", page=0)
    async with Client(server.url) as client:
        first = await client.list_tools(cache_mode="bypass")
        again = await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
    assert [t.name for t in again.tools] == [t.name for t in first.tools]
    assert again.next_cursor == first.next_cursor


@pytest.mark.parametrize("mode", MODES)
async def test_endless(server: TestServer, mode: str) -> None:
    server.fault("endless")
    cursors: set[str] = set()
    names: list[str] = []
    async with Client(server.url, mode=mode) as client:
        cursor = None
        for _ in range(12):
            result = await client.list_tools(cursor=cursor, cache_mode="bypass")
            names += [t.name for t in result.tools]
            cursor = result.next_cursor
            assert cursor is not None and cursor not in cursors
            cursors.add(cursor)
    assert names[:50] == server.state()["names"]
    assert len(names) == 120 and len(set(names)) == 120
    assert all(n.startswith("endless.placeholder_") for n in names[50:])


@pytest.mark.parametrize("mode", MODES)
async def test_stale_cursor_once(server: TestServer, mode: str) -> None:
    server.fault("stale_cursor_once")
    async with Client(server.url, mode=mode) as client:
        first = await client.list_tools(cache_mode="bypass")  # no cursor: unaffected
        with pytest.raises(MCPError) as info:
            await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
        assert info.value.error.code == types.INVALID_PARAMS
        tools, pages = await walk(client)
    assert (len(tools), pages) == (50, 5)


async def test_faults_on_other_lists(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(tools=5, prompts=5)
    server.fault("jsonrpc_error", method="prompts/list")
    async with Client(server.url) as client:
        assert len((await client.list_tools(cache_mode="bypass")).tools) == 5
        with pytest.raises(MCPError):
            await client.list_prompts(cache_mode="bypass")


async def test_stale_cursor_once_on_a_given_page(server: TestServer) -> None:
    server.fault("stale_cursor_once", page=2)
    async with Client(server.url) as client:
        cursor = None
        for _ in range(2):
            cursor = (
                await client.list_tools(cursor=cursor, cache_mode="bypass")
            ).next_cursor
        with pytest.raises(MCPError) as info:
            await client.list_tools(cursor=cursor, cache_mode="bypass")
        assert info.value.error.code == types.INVALID_PARAMS
        assert len((await walk(client))[0]) == 50
