"""Fixtures for the test-server tests (imported, not registered as a plugin)."""

from __future__ import annotations

from testservers.pytest_plugin import (  # noqa: F401
    mcp_server_factory,
    pytest_collection_modifyitems,
    stdio_server_factory,
)
