"""Pytest fixtures for the MCP test servers.

Register with `pytest_plugins = ["testservers.pytest_plugin"]` in a root
conftest, or import the fixtures (and the collection hook, which pre-boots
the fork server) into a conftest module directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testservers.harness import (
    StdioTestServer,
    TestServer,
    start_server,
    stdio_server,
    warm_up,
)

__all__ = [
    "mcp_server_factory",
    "pytest_collection_modifyitems",
    "stdio_server_factory",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Boot the fork server while other tests run if any test starts HTTP servers."""
    if any("mcp_server_factory" in getattr(i, "fixturenames", ()) for i in items):
        warm_up()


@pytest.fixture
def mcp_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., TestServer]]:
    """Start HTTP test servers with `start_server(**kw)`; all are killed at teardown."""
    servers: list[TestServer] = []

    def factory(**kw: Any) -> TestServer:
        kw.setdefault("workdir", tmp_path_factory.mktemp("mcp-server"))
        server = start_server(**kw)
        servers.append(server)
        return server

    yield factory
    for server in servers:
        server.kill()


@pytest.fixture
def stdio_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., StdioTestServer]:
    """Create stdio test servers with `stdio_server(**kw)` in pytest temp dirs."""

    def factory(**kw: Any) -> StdioTestServer:
        if kw.get("state_file") is None:
            kw["state_file"] = Path(tmp_path_factory.mktemp("mcp-stdio")) / "state.json"
        return stdio_server(**kw)

    return factory
