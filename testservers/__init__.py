"""MCP test servers for Toolsync's tests, benchmarks and demo.

- `testservers.catalog` / `testservers.generators`: raw catalog data (no MCP).
- `testservers.server`: `build_server()`, the low-level MCP server.
- `testservers.app`: the HTTP app (MCP + control API) and the stdio runner.
- `testservers.harness`: `start_server()` / `stdio_server()` for tests.
- `testservers.pytest_plugin`: `mcp_server_factory`, `stdio_server_factory`.

Run one with `python -m testservers --transport http --port 8765`.
"""
