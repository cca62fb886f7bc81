"""Event-driven refresh end to end: `manage.py listen`, a real worker, Redis, real servers.

Every test runs the listener as its own process next to a real Celery worker
(and beat where the schedule matters) on the test database, mutates real MCP
test servers and waits for the applied catalog. Latency is only bounded
generously here (a 2-core CI box is slow); `make bench` measures it.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gateways.models import Gateway
from gateways.services import gateway_create, tenant_get_or_create
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tests.events.conftest import kill_quietly, wait_until
from tests.schedule.test_metrics import samples
from tools.models import Prompt, Resource, Tool

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

ROOT = Path(__file__).resolve().parents[2]
APPLIED_WITHIN = 30.0  # generous; the benchmark measures the real latency


def make_gateway(prefix: str, **kw: Any) -> Gateway:
    tenant = tenant_get_or_create(slug="events")
    gateway = gateway_create(
        tenant=tenant,
        name=prefix,
        prefix=prefix,
        deactivate_missing=True,
        reactivate_returning=True,
        **kw,
    )
    # The baseline catalog, read before anything listens.
    refresh_gateway(
        gateway=gateway,
        trigger="cli",
        options=RefreshOptions(apply=True, deactivate_missing=True),
    )
    return gateway


def http_gateway(prefix: str, server, transport: str = "streamable_http") -> Gateway:
    url = server.url if transport == "streamable_http" else server.sse_url
    return make_gateway(prefix, transport=transport, url=url)


def stdio_gateway(prefix: str, stdio) -> Gateway:
    return make_gateway(
        prefix,
        transport="stdio",
        command=sys.executable,
        args=list(stdio.args),
        env=dict(stdio.env),
    )


def active_tools(gateway: Gateway) -> dict[str, Any]:
    return dict(
        Tool.objects.filter(gateway_id=gateway.pk, active=True).values_list(
            "name", "description"
        )
    )


def served_tools(server) -> dict[str, Any]:
    return {t["name"]: t.get("description") for t in server.snapshot()["tools"]}


def wait_applied(gateway: Gateway, server, timeout: float = APPLIED_WITHIN) -> float:
    """Wait until the active catalog equals the server's; returns the seconds it took."""
    started = time.monotonic()
    wait_until(
        lambda: active_tools(gateway) == served_tools(server),
        timeout,
        f"gateway {gateway.prefix}: catalog equal to the server's",
    )
    return time.monotonic() - started


def event_runs(gateway: Gateway) -> list[RefreshRun]:
    return list(
        RefreshRun.objects.filter(gateway=gateway, trigger="event").order_by("pk")
    )


def idle(gateway: Gateway) -> bool:
    return not RefreshRun.objects.filter(
        gateway=gateway, status__in=["queued", "running"]
    ).exists()


def test_a_notified_change_is_applied_in_both_eras_over_every_transport(
    celery_cluster,
    start_listener,
    mcp_server_factory,
    stdio_server_factory,
    client,
    monkeypatch,
):
    servers: dict[str, Any] = {}
    gateways: dict[str, Gateway] = {}
    for era in ("legacy", "modern"):
        http = mcp_server_factory(tools=8, era=era)
        sse = mcp_server_factory(tools=8, era=era)
        stdio = stdio_server_factory(tools=8, era=era)
        for transport, server in (("http", http), ("sse", sse), ("stdio", stdio)):
            name = f"{transport}-{era}"
            servers[name] = server
            gateways[name] = (
                stdio_gateway(name, server)
                if transport == "stdio"
                else http_gateway(
                    name, server, "streamable_http" if transport == "http" else "sse"
                )
            )
    celery_cluster.worker(concurrency=2)
    listener = start_listener()
    listener.wait_listening(g.pk for g in gateways.values())
    status = listener.status()
    for name, gateway in gateways.items():
        assert status["gateways"][str(gateway.pk)]["era"] == name.split("-")[1], name

    for name, server in servers.items():
        # stdio test servers announce a changed state file by themselves.
        server.mutate(change=0.25, add=0.25, remove=0.25, seed=7)
        if not name.startswith("stdio"):
            server.notify()
    announced = time.monotonic()
    served = {name: served_tools(server) for name, server in servers.items()}
    took: dict[str, float] = {}

    def all_applied() -> bool:
        for name, gateway in gateways.items():
            if name not in took and active_tools(gateway) == served[name]:
                took[name] = time.monotonic() - announced
        return len(took) == len(gateways)

    wait_until(all_applied, APPLIED_WITHIN, f"every catalog applied (so far {took})")
    # Six refreshes on two worker children: some wait for a free child.
    print("announced -> applied (s):", {k: round(v, 2) for k, v in took.items()})
    for name, gateway in gateways.items():
        runs = event_runs(gateway)
        assert runs and all(r.status == "succeeded" and r.applied for r in runs), name

    # The listener's health and per-gateway counters, through /metrics.
    monkeypatch.setenv(
        "PROMETHEUS_MULTIPROC_DIR", celery_cluster.env["PROMETHEUS_MULTIPROC_DIR"]
    )
    listener.wait(lambda s: s["sessions"]["listening"] == 6, "all six still listening")
    got = samples(client.get("/metrics").content.decode())
    assert got[("toolsync_listener_sessions", (("state", "listening"),))] == 6
    assert got[
        ("toolsync_listener_heartbeat_timestamp_seconds", (("shard", "0/1"),))
    ] > (time.time() - 60)
    for gateway in gateways.values():
        key = (
            "toolsync_listener_refreshes_fired_total",
            (("gateway", str(gateway.pk)), ("reason", "notification")),
        )
        assert got.get(key, 0) >= 1, gateway.prefix


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_storm_of_1000_notifications_in_a_second_yields_one_refresh(
    celery_cluster, start_listener, mcp_server_factory, era
):
    server = mcp_server_factory(tools=20, era=era)
    gateway = http_gateway(f"storm-{era}", server)
    celery_cluster.worker(concurrency=2)
    listener = start_listener()
    listener.wait_listening([gateway.pk])

    server.mutate(change=0.3, add=0.3, remove=0.3, seed=11)
    started = time.monotonic()
    server.notify(count=1000)
    sent_in = time.monotonic() - started
    print(f"1000 notifications sent in {sent_in:.2f} s")
    # Typically ~0.3 s. Past the 5 s max delay a second refresh would be
    # right, not a failure of the debouncer: only then is the run moot.
    assert sent_in < 4.0, f"the storm took {sent_in:.1f} s to send"
    wait_applied(gateway, server)
    time.sleep(2.5)  # longer than the quiet window: anything further would show
    wait_until(lambda: idle(gateway), 30, "no run left")

    state = listener.gateway(gateway.pk)
    if era == "legacy":
        assert state["notifications"] == 1000  # each one counted
    else:
        # 2026 subscriptions deliver events level-triggered: the SDK folds
        # the ones not consumed yet, so fewer arrive; all are debounced.
        assert 1 <= state["notifications"] <= 1000
    assert state["refreshes"] == 1
    runs = event_runs(gateway)
    succeeded = [r for r in runs if r.status == "succeeded"]
    # One refresh, plus at most one follow-up (never one per notification).
    assert 1 <= len(succeeded) <= 2 and len(runs) <= 2, [
        (r.status, r.reason) for r in runs
    ]
    assert active_tools(gateway) == served_tools(server)


def test_prompts_and_resources_announcements_refresh_them_too(
    celery_cluster, start_listener, mcp_server_factory
):
    server = mcp_server_factory(tools=3, prompts=3, resources=3, era="legacy")
    gateway = http_gateway("kinds", server)  # policy: tools only
    assert not gateway.include_prompts and not gateway.include_resources
    celery_cluster.worker(concurrency=2)
    listener = start_listener()
    listener.wait_listening([gateway.pk])

    def names(model, key: str) -> set[str]:
        return set(
            model.objects.filter(gateway=gateway, active=True).values_list(
                key, flat=True
            )
        )

    for kind, model, key in (
        ("prompts", Prompt, "name"),
        ("resources", Resource, "uri"),
    ):
        server.mutate(kind=kind, add=0.5, change=0, remove=0, seed=21)
        server.notify([kind])
        wanted = {entry[key] for entry in server.snapshot()[kind]}
        wait_until(
            lambda m=model, k=key, w=wanted: names(m, k) == w, APPLIED_WITHIN, kind
        )
        run = event_runs(gateway)[-1]
        assert run.options[f"include_{kind}"] is True, run.options
        other = "resources" if kind == "prompts" else "prompts"
        assert run.options[f"include_{other}"] is False
        wait_until(lambda: idle(gateway), 30, "no run left")


def test_a_notification_during_a_slow_refresh_is_not_lost(
    celery_cluster, start_listener, mcp_server_factory
):
    server = mcp_server_factory(tools=30, page_size=10, era="legacy")
    gateway = http_gateway("slow", server)
    celery_cluster.worker(concurrency=2)
    listener = start_listener()
    listener.wait_listening([gateway.pk])

    server.fault("slow", page=0, seconds=4, times=1)
    server.mutate(change=0.2, add=0.2, remove=0.2, seed=1)
    server.notify()
    wait_until(
        lambda: Gateway.objects.filter(
            pk=gateway.pk, lease_token__isnull=False
        ).exists(),
        APPLIED_WITHIN,
        "the slow refresh holds the lease",
    )
    # Announced mid-run: the running refresh may already have read page 0.
    server.mutate(change=0.2, add=0.2, remove=0.2, seed=2)
    server.notify()
    wait_until(
        lambda: RefreshRun.objects.filter(
            gateway=gateway, error_code="coalesced"
        ).exists(),
        APPLIED_WITHIN,
        "the mid-run request coalesced into the running refresh",
    )
    wait_applied(gateway, server)
    wait_until(lambda: idle(gateway), 30, "no run left")
    runs = event_runs(gateway)
    slow, *rest = [r for r in runs if r.status == "succeeded"]
    follow_ups = [r for r in rest if r.queued_at >= slow.queued_at]
    assert len(follow_ups) == 1, [(r.pk, r.status, r.reason) for r in runs]
    gateway.refresh_from_db()
    assert gateway.follow_up_requested is False
    assert active_tools(gateway) == served_tools(server)


def test_killed_and_restarted_servers_are_reconnected_and_still_honoured(
    celery_cluster, start_listener, mcp_server_factory, stdio_server_factory
):
    http = mcp_server_factory(tools=6, era="legacy")
    modern = mcp_server_factory(tools=6, era="modern")
    stdio = stdio_server_factory(tools=6, era="legacy")
    gateways = {
        "legacy": http_gateway("kill-legacy", http),
        "modern": http_gateway("kill-modern", modern),
        "stdio": stdio_gateway("kill-stdio", stdio),
    }
    celery_cluster.worker(concurrency=2)
    listener = start_listener()
    listener.wait_listening(g.pk for g in gateways.values())

    # Kill both HTTP servers: the sessions die; the listener backs off.
    ports = {name: s.port for name, s in (("legacy", http), ("modern", modern))}
    for server in (http, modern):
        server.kill()
    for name in ("legacy", "modern"):
        listener.wait(
            lambda s, g=gateways[name]: s["gateways"][str(g.pk)]["failures"] >= 2,
            f"{name}: session lost and reconnects failing",
        )
    # Same port, same catalog file: "the server came back".
    back = {
        "legacy": mcp_server_factory(
            era="legacy", port=ports["legacy"], state_file=http.state_file
        ),
        "modern": mcp_server_factory(
            era="modern", port=ports["modern"], state_file=modern.state_file
        ),
    }
    # The stdio server is the listener's own child: kill it.
    [child] = listener.children(str(stdio.state_file))
    kill_quietly(child, signal.SIGKILL)

    servers = {**back, "stdio": stdio}
    for name, gateway in gateways.items():
        listener.wait(
            lambda s, g=gateway: (
                s["gateways"][str(g.pk)]["reconnects"] >= 1
                and s["gateways"][str(g.pk)]["state"] == "listening"
            ),
            f"{name}: listening again",
        )
        # A reconnect re-reads the catalog (nothing is replayed)...
        wait_until(lambda g=gateway: event_runs(g) and idle(g), APPLIED_WITHIN, name)
    # ...and the next notification is honoured.
    for name, server in servers.items():
        server.mutate(change=0.3, add=0.3, seed=5)
        if name != "stdio":
            server.notify()
    for name, gateway in gateways.items():
        wait_applied(gateway, servers[name])
        reasons = [r.status for r in event_runs(gateway)]
        assert len(reasons) >= 2 and set(reasons) == {"succeeded"}, (name, reasons)


def test_a_server_that_never_notifies_is_kept_fresh_by_the_schedule(
    celery_cluster, start_listener, mcp_server_factory
):
    # 2026-only and no subscriptions/listen: nothing can be announced to us.
    server = mcp_server_factory(tools=6, era="modern", notify_capable=False)
    gateway = http_gateway("silent", server)
    Gateway.objects.filter(pk=gateway.pk).update(refresh_interval=2)
    celery_cluster.worker(concurrency=2)
    celery_cluster.beat()
    listener = start_listener()
    listener.wait(
        lambda s: (
            (s["gateways"].get(str(gateway.pk)) or {}).get("state") == "unsupported"
        ),
        "the listener gives the gateway up to the schedule",
    )
    server.mutate(change=0.3, add=0.3, remove=0.3, seed=9)
    wait_applied(gateway, server)
    applied_by = {
        r.trigger
        for r in RefreshRun.objects.filter(gateway=gateway, applied=True).exclude(
            trigger="cli"
        )
    }
    assert applied_by == {"schedule"}


def test_gateways_added_and_disabled_while_the_listener_runs(
    celery_cluster, start_listener, mcp_server_factory
):
    first = mcp_server_factory(tools=5)
    second = mcp_server_factory(tools=5, era="modern")
    kept = http_gateway("kept", first)
    celery_cluster.worker(concurrency=2)
    listener = start_listener()
    listener.wait_listening([kept.pk])

    added = http_gateway("added", second)  # registered while it runs
    listener.wait_listening([added.pk], timeout=30)
    second.mutate(add=0.4, seed=3)
    second.notify()
    wait_applied(added, second)

    Gateway.objects.filter(pk=kept.pk).update(enabled=False)
    listener.wait(lambda s: str(kept.pk) not in s["gateways"], "session closed", 30)
    before = len(event_runs(kept))
    first.mutate(add=0.4, seed=4)
    first.notify()
    time.sleep(2.0)  # four times the quiet window
    assert len(event_runs(kept)) == before  # a disabled gateway is not refreshed
    assert active_tools(kept) != served_tools(first)
