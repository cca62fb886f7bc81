"""The probe against real MCP test servers: transports, eras, guards, faults."""

from __future__ import annotations

import socket

import pytest

from refresh.probe import ProbeError, ProbeLimits, ProbeTarget, probe_gateway

FAST = ProbeLimits(request_timeout=3.0, deadline=10.0)


def http(server, **kw) -> ProbeTarget:
    return ProbeTarget(transport="streamable_http", url=server.url, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_follows_next_cursor_to_the_end(mcp_server_factory):
    server = mcp_server_factory(tools=1000, page_size=100)
    result = probe_gateway(http(server), FAST)
    assert result.tools.complete and result.tools.incomplete_reason is None
    assert result.tools.pages == 10
    assert len(result.tools.entries) == 1000
    assert len({t["name"] for t in result.tools.entries}) == 1000


@pytest.mark.parametrize(
    ("era", "hint", "expected"),
    [
        ("both", "", "modern"),
        ("both", "legacy", "legacy"),
        ("legacy", "", "legacy"),
        ("modern", "", "modern"),
        # The remembered era is stale: the server went modern-only.
        ("modern", "legacy", "modern"),
    ],
)
def test_both_protocol_eras(mcp_server_factory, era, hint, expected):
    server = mcp_server_factory(tools=30, page_size=7, era=era)
    result = probe_gateway(http(server, era=hint), FAST)
    assert result.era == expected
    assert result.tools.complete and len(result.tools.entries) == 30
    assert result.protocol_version
    assert "tools" in result.capabilities
    assert result.server_info.get("name")


def test_sse_transport(mcp_server_factory):
    server = mcp_server_factory(tools=120, page_size=50)
    result = probe_gateway(ProbeTarget(transport="sse", url=server.sse_url), FAST)
    assert result.tools.complete and len(result.tools.entries) == 120


@pytest.mark.parametrize("era", ["both", "legacy"])
def test_stdio_transport(stdio_server_factory, era):
    server = stdio_server_factory(tools=25, page_size=10, era=era)
    target = ProbeTarget(
        transport="stdio",
        command=server.command,
        args=tuple(server.args),
        env=server.env,
    )
    result = probe_gateway(target, FAST)
    assert result.tools.complete and len(result.tools.entries) == 25


def test_prompts_and_resources_when_asked(mcp_server_factory):
    server = mcp_server_factory(tools=3, prompts=4, resources=5)
    result = probe_gateway(
        http(server), FAST, include_prompts=True, include_resources=True
    )
    assert len(result.prompts.entries) == 4 and result.prompts.complete
    assert len(result.resources.entries) == 5 and result.resources.complete
    plain = probe_gateway(http(server), FAST)
    assert plain.prompts is None and plain.resources is None


def test_empty_catalog_is_complete(mcp_server_factory):
    server = mcp_server_factory(tools=0)
    result = probe_gateway(http(server), FAST)
    assert result.tools.complete and result.tools.entries == ()


def test_malformed_entries_arrive_raw_and_keep_their_page(mcp_server_factory):
    server = mcp_server_factory(tools=0)
    good = {"name": "ok", "inputSchema": {"type": "object"}}
    server.set_tools([good, {"name": "no_schema"}, {"name": "bad", "inputSchema": "x"}])
    result = probe_gateway(http(server), FAST)
    assert result.tools.complete
    assert [t["name"] for t in result.tools.entries] == ["ok", "no_schema", "bad"]


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("jsonrpc_error", "page 3 failed: JSON-RPC error -32603"),
        ("http_500", "page 3 failed: JSON-RPC error -32603"),
        ("garbage", "page 3 failed: JSON-RPC error -32700"),
        ("html", "page 3 failed: JSON-RPC error -32600"),
    ],
)
def test_a_failing_page_makes_the_catalog_incomplete(mcp_server_factory, kind, reason):
    server = mcp_server_factory(tools=50, page_size=10)
    server.fault(kind, page=2)
    result = probe_gateway(http(server), FAST)
    assert not result.tools.complete
    assert reason in result.tools.incomplete_reason
    assert len(result.tools.entries) == 20  # pages 1-2 kept, nothing beyond


def test_page_timeout(mcp_server_factory):
    server = mcp_server_factory(tools=30, page_size=10)
    server.fault("timeout", page=1, seconds=30)
    result = probe_gateway(
        http(server), ProbeLimits(request_timeout=1.0, deadline=10.0)
    )
    assert not result.tools.complete
    assert result.tools.incomplete_reason == "page 2 timed out after 1 s"


def test_overall_deadline_with_slow_pages(mcp_server_factory):
    server = mcp_server_factory(tools=100, page_size=10)
    server.fault("slow", seconds=0.4)
    result = probe_gateway(http(server), ProbeLimits(request_timeout=5.0, deadline=1.5))
    assert not result.tools.complete
    assert "overall deadline of 1.5 s reached" in result.tools.incomplete_reason
    assert 0 < len(result.tools.entries) < 100


def test_cursor_loop(mcp_server_factory):
    server = mcp_server_factory(tools=50, page_size=10)
    server.fault("cursor_loop", page=2)
    result = probe_gateway(http(server), FAST)
    assert not result.tools.complete
    assert "cursor loop" in result.tools.incomplete_reason


def test_endless_pagination_stops_at_max_pages(mcp_server_factory):
    server = mcp_server_factory(tools=20, page_size=10)
    server.fault("endless")
    result = probe_gateway(
        http(server), ProbeLimits(max_pages=15, request_timeout=3, deadline=20)
    )
    assert not result.tools.complete
    assert result.tools.incomplete_reason == "stopped after 15 pages (max pages 15)"
    assert result.tools.pages == 15


def test_max_tools_guard(mcp_server_factory):
    server = mcp_server_factory(tools=60, page_size=25)
    result = probe_gateway(
        http(server), ProbeLimits(max_entries=40, request_timeout=3, deadline=10)
    )
    assert not result.tools.complete
    assert "more than 40 tools listed" in result.tools.incomplete_reason
    assert len(result.tools.entries) == 40


def test_stale_cursor_restarts_once_from_page_one(mcp_server_factory):
    server = mcp_server_factory(tools=45, page_size=10)
    server.fault("stale_cursor_once")
    result = probe_gateway(http(server), FAST)
    assert result.tools.complete and result.tools.restarted
    assert len(result.tools.entries) == 45


def test_stale_cursor_twice_is_incomplete(mcp_server_factory):
    server = mcp_server_factory(tools=45, page_size=10)
    server.fault("stale_cursor_once", times=2)
    result = probe_gateway(http(server), FAST)
    assert not result.tools.complete
    assert "JSON-RPC error -32602" in result.tools.incomplete_reason


def test_connection_refused():
    target = ProbeTarget(
        transport="streamable_http", url=f"http://127.0.0.1:{free_port()}/mcp"
    )
    with pytest.raises(ProbeError) as err:
        probe_gateway(target, FAST)
    assert err.value.code == "connect_failed" and err.value.retryable


def test_server_down_after_kill(mcp_server_factory):
    server = mcp_server_factory(tools=5)
    server.kill()
    with pytest.raises(ProbeError) as err:
        probe_gateway(http(server), FAST)
    assert err.value.code == "connect_failed"


def test_no_mcp_endpoint(mcp_server_factory):
    server = mcp_server_factory(tools=5)
    target = ProbeTarget(
        transport="streamable_http", url=server.url.replace("/mcp", "/nope")
    )
    with pytest.raises(ProbeError) as err:
        probe_gateway(target, FAST)
    assert err.value.code == "protocol_error" and "404" in err.value.message


def test_missing_stdio_command():
    target = ProbeTarget(transport="stdio", command="/nonexistent/toolsync-mcp")
    with pytest.raises(ProbeError) as err:
        probe_gateway(target, FAST)
    assert err.value.code in ("bad_target", "connect_failed")


def test_bearer_auth(mcp_server_factory):
    server = mcp_server_factory(tools=4, require_bearer="s3cret-token")
    with pytest.raises(ProbeError) as err:
        probe_gateway(http(server), FAST)
    assert err.value.code == "auth_failed"
    assert "s3cret-token" not in err.value.message
    ok = probe_gateway(
        http(server, headers={"Authorization": "Bearer s3cret-token"}), FAST
    )
    assert len(ok.tools.entries) == 4


def test_custom_header_auth(mcp_server_factory):
    server = mcp_server_factory(tools=2, require_header=("X-Api-Key", "k-123456"))
    ok = probe_gateway(http(server, headers={"X-Api-Key": "k-123456"}), FAST)
    assert len(ok.tools.entries) == 2
    assert any(s["headers"].get("x-api-key") == "k-123456" for s in server.seen_auth())


def test_headers_never_in_target_repr():
    target = ProbeTarget(
        transport="streamable_http",
        url="http://x/mcp",
        headers={"Authorization": "Bearer zzz-secret"},
    )
    assert "zzz-secret" not in repr(target)
