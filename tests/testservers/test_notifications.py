"""list_changed notifications in both eras, over HTTP, SSE and stdio."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, types
from mcp.client.sse import sse_client
from mcp.client.subscriptions import PromptsListChanged, ToolsListChanged

from testservers.harness import StdioTestServer, TestServer

from .helpers import MODERN, until, walk

pytestmark = pytest.mark.anyio

Factory = Callable[..., TestServer]
StdioFactory = Callable[..., StdioTestServer]


class Inbox:
    """A `message_handler` that records list_changed notifications."""

    def __init__(self) -> None:
        self.events: dict[type[Any], anyio.Event] = {
            types.ToolListChangedNotification: anyio.Event(),
            types.PromptListChangedNotification: anyio.Event(),
            types.ResourceListChangedNotification: anyio.Event(),
        }
        self.count = 0

    async def __call__(self, message: Any) -> None:
        for kind, event in self.events.items():
            if isinstance(message, kind):
                self.count += 1
                event.set()

    @property
    def tools(self) -> anyio.Event:
        return self.events[types.ToolListChangedNotification]


async def test_handshake_era_http_client_gets_notifications(
    mcp_server_factory: Factory,
) -> None:
    server = mcp_server_factory(tools=5, prompts=2, resources=2)
    inbox = Inbox()
    async with Client(server.url, mode="legacy", message_handler=inbox) as client:
        await client.list_tools(cache_mode="bypass")
        await until(inbox.tools, server.notify)
        assert server.state()["sessions"] == 1
        everything = inbox.events.values()
        await until(
            next(e for e in everything if not e.is_set()),
            lambda: server.notify(["prompts", "resources"]),
        )
        with anyio.fail_after(10):
            for event in everything:
                await event.wait()


async def test_notify_count_sends_back_to_back(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory()
    inbox = Inbox()
    async with Client(server.url, mode="legacy", message_handler=inbox) as client:
        await client.list_tools(cache_mode="bypass")
        await until(inbox.tools, server.notify)
        start = inbox.count
        assert server.notify(count=5) == 1
        with anyio.fail_after(10):
            while inbox.count < start + 5:
                await anyio.sleep(0.01)


async def test_notify_without_clients_is_safe(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory()
    assert server.notify(["tools", "prompts", "resources"], count=3) == 0
    async with Client(server.url, mode="legacy") as client:
        await client.list_tools(cache_mode="bypass")
    # The client is gone; its session is dropped rather than breaking notify.
    server.notify()
    assert server.notify() == 0


async def test_2026_era_client_listens(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(prompts=1)
    async with Client(server.url, mode="auto") as client:
        assert client.protocol_version == MODERN
        async with client.listen(
            tools_list_changed=True, prompts_list_changed=True
        ) as sub:
            await anyio.to_thread.run_sync(lambda: server.notify(["tools", "prompts"]))
            with anyio.fail_after(10):
                first = await sub.__anext__()
                second = await sub.__anext__()
        assert {type(first), type(second)} == {ToolsListChanged, PromptsListChanged}


async def test_notify_on_mutate(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(notify_on_mutate=True)
    async with (
        Client(server.url) as client,
        client.listen(tools_list_changed=True) as sub,
    ):
        result = await anyio.to_thread.run_sync(lambda: server.mutate(add=0.5, seed=1))
        with anyio.fail_after(10):
            assert isinstance(await sub.__anext__(), ToolsListChanged)
        tools, _ = await walk(client)
    assert set(result["added"]) <= {t.name for t in tools}


async def test_mutate_every_timer(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(mutate_every=0.2, notify_on_mutate=True)
    generation = server.state()["generation"]
    async with (
        Client(server.url) as client,
        client.listen(tools_list_changed=True) as sub,
    ):
        with anyio.fail_after(10):
            await sub.__anext__()
    assert server.state()["generation"] > generation


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sse_transport(mcp_server_factory: Factory, mode: str) -> None:
    server = mcp_server_factory(tools=250, page_size=100)
    inbox = Inbox()
    async with Client(
        sse_client(server.sse_url), mode=mode, message_handler=inbox
    ) as client:
        tools, pages = await walk(client)
        assert (len(tools), pages) == (250, 3)
        if mode == "legacy":
            await until(inbox.tools, server.notify)
        else:
            assert client.protocol_version == MODERN
            async with client.listen(tools_list_changed=True) as sub:
                await anyio.to_thread.run_sync(server.notify)
                with anyio.fail_after(10):
                    assert isinstance(await sub.__anext__(), ToolsListChanged)


async def test_sse_legacy_only_server(mcp_server_factory: Factory) -> None:
    server = mcp_server_factory(era="legacy")
    async with Client(sse_client(server.sse_url)) as client:
        assert client.protocol_version != MODERN
        assert len((await walk(client))[0]) == 10


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio_lists_and_follows_state_file(
    stdio_server_factory: StdioFactory, mode: str
) -> None:
    stdio = stdio_server_factory(tools=120, page_size=50)
    inbox = Inbox()
    async with Client(stdio.params(), mode=mode, message_handler=inbox) as client:
        tools, pages = await walk(client)
        assert (len(tools), pages) == (120, 3)
        if mode == "legacy":
            await anyio.to_thread.run_sync(
                lambda: stdio.mutate(add=0.1, remove=0, seed=2)
            )
            with anyio.fail_after(10):
                await inbox.tools.wait()
        else:
            assert client.protocol_version == MODERN
            async with client.listen(tools_list_changed=True) as sub:
                await anyio.to_thread.run_sync(
                    lambda: stdio.mutate(add=0.1, remove=0, seed=2)
                )
                with anyio.fail_after(10):
                    assert isinstance(await sub.__anext__(), ToolsListChanged)
        tools, _ = await walk(client)
    assert [t.name for t in tools] == stdio.state()["names"]
    assert len(tools) == 132


async def test_stdio_notify_and_faults(stdio_server_factory: StdioFactory) -> None:
    stdio = stdio_server_factory(tools=30, page_size=10, era="legacy")
    inbox = Inbox()
    async with Client(stdio.params(), message_handler=inbox) as client:
        assert client.protocol_version != MODERN
        await anyio.to_thread.run_sync(stdio.notify)
        with anyio.fail_after(10):
            await inbox.tools.wait()
        stdio.fault("jsonrpc_error", page=0)
        with anyio.fail_after(10):
            while True:  # wait for the server to pick the fault up
                try:
                    await client.list_tools(cache_mode="bypass")
                except MCPError as exc:
                    assert exc.error.code == types.INTERNAL_ERROR
                    break
                await anyio.sleep(0.05)
        stdio.clear_faults()
        with anyio.fail_after(10):
            while True:
                try:
                    tools, _ = await walk(client)
                    break
                except MCPError:
                    await anyio.sleep(0.05)
    assert len(tools) == 30
