"""Hostile servers and faults, end to end through the engine and real MCP servers.

Each gives a clear run outcome (skipped entries with reasons, complete: false
with the reason, or a failed run with the reason): never a crash, never a
partial write, never a deactivation on an incomplete catalog.
"""

from __future__ import annotations

import socket

import pytest
from django.test import override_settings

from refresh.exceptions import GatewayUnreachable
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tests.factories import GatewayFactory
from tools.models import Tool, ToolRevision

pytestmark = pytest.mark.django_db

FAST = {
    "TOOLSYNC_PROBE_REQUEST_TIMEOUT": 2.0,
    "TOOLSYNC_PROBE_DEADLINE": 8.0,
}
APPLY_ALL = RefreshOptions(apply=True, deactivate_missing=True)


def refresh(gateway, options=APPLY_ALL):
    return refresh_gateway(
        gateway=gateway, trigger=RefreshRun.Trigger.API, options=options
    )


def state():
    return (
        list(Tool.objects.order_by("id").values_list("name", "spec_hash", "active")),
        ToolRevision.objects.count(),
    )


@pytest.fixture
def served(tenant, mcp_server_factory):
    """A gateway whose 40-tool catalog (pages of 10) is already applied."""
    server = mcp_server_factory(tools=40, page_size=10)
    gateway = GatewayFactory(tenant=tenant, url=server.url)
    assert refresh(gateway).status == "succeeded"
    assert Tool.objects.filter(gateway=gateway, active=True).count() == 40
    return server, gateway


@override_settings(**FAST)
@pytest.mark.parametrize(
    ("kind", "kwargs", "reason"),
    [
        ("jsonrpc_error", {"page": 2}, "page 3 failed: JSON-RPC error -32603"),
        ("http_500", {"page": 1}, "page 2 failed: JSON-RPC error -32603"),
        ("garbage", {"page": 3}, "page 4 failed: JSON-RPC error -32700"),
        ("html", {"page": 1}, "page 2 failed: JSON-RPC error -32600"),
        ("timeout", {"page": 2, "seconds": 20}, "page 3 timed out after 2 s"),
        ("cursor_loop", {"page": 1}, "cursor loop"),
        ("endless", {}, "stopped after"),
    ],
)
def test_a_partial_listing_never_deactivates(served, kind, kwargs, reason):
    server, gateway = served
    server.remove_tools([f"{n}" for n in server.state()["names"][:5]])  # 5 really gone
    server.fault(kind, **kwargs)
    before = state()
    with override_settings(TOOLSYNC_PROBE_MAX_PAGES=12):
        run = refresh(gateway)
    assert run.status == "succeeded" and run.complete is False
    assert reason in run.report["incomplete_reason"]
    assert run.report["summary"]["disappeared"] == 0
    after = {name: (h, active) for name, h, active in state()[0]}
    # Rows already known are untouched (an endless paginator may add the
    # extra entries it really listed, gated and pending like any new tool).
    assert {n: after[n] for n, _, _ in before[0]} == {
        n: (h, a) for n, h, a in before[0]
    }


@override_settings(**FAST)
def test_slow_pages_within_the_timeout_still_complete(served):
    server, gateway = served
    server.fault("slow", seconds=0.2)
    run = refresh(gateway)
    assert run.complete is True and run.report["summary"]["unchanged"] == 40


@override_settings(**FAST)
def test_stale_cursor_restarts_and_completes(served):
    server, gateway = served
    server.mutate(change=0.1, add=0, remove=0)
    server.fault("stale_cursor_once")
    run = refresh(gateway)
    assert run.complete is True
    assert run.report["summary"]["updated"] == 4


@override_settings(**FAST)
def test_server_down_fails_the_run_and_writes_nothing(served):
    server, gateway = served
    server.kill()
    before = state()
    with pytest.raises(GatewayUnreachable) as err:
        refresh(gateway)
    run = RefreshRun.objects.get(pk=err.value.run_id)
    assert run.status == "failed" and run.error_code == "connect_failed"
    assert "connection refused" in run.reason
    assert state() == before
    gateway.refresh_from_db()
    assert gateway.lease_token is None and gateway.last_refresh_status == "failed"


@override_settings(**FAST)
def test_connection_refused_scheduled_run_fails_without_raising(tenant):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gateway = GatewayFactory(tenant=tenant, url=f"http://127.0.0.1:{port}/mcp")
    run = refresh_gateway(
        gateway=gateway, trigger=RefreshRun.Trigger.SCHEDULE, options=APPLY_ALL
    )
    assert run.status == "failed" and run.error_code == "connect_failed"


@override_settings(**FAST)
def test_empty_catalog_is_complete_and_deactivates_only_with_the_flag(served):
    server, gateway = served
    server.set_tools([])
    kept = refresh(gateway, RefreshOptions(apply=True))
    assert kept.complete and kept.report["summary"]["disappeared"] == 40
    assert Tool.objects.filter(active=True).count() == 40
    gone = refresh(gateway)
    assert gone.report["summary"]["deactivated"] == 40
    assert Tool.objects.filter(active=True).count() == 0 and Tool.objects.count() == 40


HOSTILE_ENTRIES = [
    ({"name": "dup", "inputSchema": {"type": "object"}}, "occurs 2 times"),
    (
        {"name": "dup", "inputSchema": {"type": "object"}, "description": "2"},
        "occurs 2 times",
    ),
    ({"name": "no_schema"}, "inputSchema is missing"),
    (
        {"name": "array_schema", "inputSchema": {"type": "array"}},
        "not an object schema",
    ),
    (
        {
            "name": "bad_schema",
            "inputSchema": {"type": "object", "properties": {"a": {"type": 7}}},
        },
        "not valid JSON Schema",
    ),
    (
        {"name": "wrong_type", "inputSchema": {"type": "object"}, "title": 12},
        "title must be a string",
    ),
    (
        {"name": "nul", "inputSchema": {"type": "object"}, "description": "a\u0000b"},
        "NUL character",
    ),
    (
        {
            "name": "huge",
            "inputSchema": {"type": "object"},
            "description": "x" * 1_048_576,
        },
        "1,048,576 characters",
    ),
    (
        {"name": "bad name!", "inputSchema": {"type": "object"}},
        "outside [A-Za-z0-9_.-]",
    ),
    ({"name": "", "inputSchema": {"type": "object"}}, "name is empty"),
    ({"name": "n" * 200, "inputSchema": {"type": "object"}}, "200 characters long"),
]


@override_settings(**FAST)
def test_hostile_entries_are_skipped_with_reasons_and_the_rest_applied(
    tenant, mcp_server_factory
):
    server = mcp_server_factory(tools=0)
    good = [{"name": f"good{i}", "inputSchema": {"type": "object"}} for i in range(3)]
    server.set_tools(good + [entry for entry, _ in HOSTILE_ENTRIES])
    gateway = GatewayFactory(tenant=tenant, url=server.url)
    run = refresh(gateway)
    assert run.status == "succeeded" and run.complete is True
    assert sorted(Tool.objects.values_list("name", flat=True)) == [
        "good0",
        "good1",
        "good2",
    ]
    reasons = [s["reason"] for s in run.report["skipped"]]
    assert len(reasons) == len(HOSTILE_ENTRIES)
    for (_, expected), reason in zip(HOSTILE_ENTRIES, reasons, strict=True):
        assert expected in reason
    assert run.report["summary"]["skipped"] == len(HOSTILE_ENTRIES)


@override_settings(**FAST)
def test_a_tool_that_turns_hostile_is_left_exactly_as_it_is(served):
    server, gateway = served
    name = server.state()["names"][0]
    broken = [t for t in server.snapshot()["tools"] if t["name"] != name]
    broken.append({"name": name, "inputSchema": "not a schema"})
    server.set_tools(broken)
    before = state()
    run = refresh(gateway)
    assert run.complete is True
    assert state() == before
    assert run.report["summary"]["disappeared"] == 0
    assert [s["name"] for s in run.report["skipped"]] == [name]
