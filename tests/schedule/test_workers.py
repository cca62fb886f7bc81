"""Scheduling, health, coalescing and metrics with real Celery workers, beat and Redis.

Every test here starts its own worker (and beat where the schedule matters)
as subprocesses on the test database, drives real MCP test servers, and
stops every process by PID.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from prometheus_client.multiprocess import MultiProcessCollector

from gateways.models import Gateway
from gateways.services import gateway_create, tenant_get_or_create
from project.celery import app
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway, refresh_run_create
from refresh.tasks import check_health_task, execute_run_task, request_refresh_task
from tests.schedule.conftest import wait_for
from tests.schedule.test_metrics import samples
from testservers.catalog import Catalog

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def send(broker: str, task, *args, **options) -> None:
    """Publish a task to the test broker (this process's app is not configured for it)."""
    with app.connection_for_write(broker) as conn:
        task.apply_async(args, connection=conn, **options)


def make_gateway(prefix: str, url: str, **policy) -> Gateway:
    tenant = tenant_get_or_create(slug="sched")
    return gateway_create(tenant=tenant, name=prefix, prefix=prefix, url=url, **policy)


def active_tools(gateway: Gateway) -> dict[str, str]:
    return dict(gateway.tools.filter(active=True).values_list("name", "description"))


def server_tools(server) -> dict[str, str]:
    return {t["name"]: t.get("description") for t in server.snapshot()["tools"]}


@pytest.mark.django_db(transaction=True)
def test_beat_refreshes_each_gateway_on_its_own_interval(
    celery_cluster, mcp_server_factory
):
    server = mcp_server_factory(tools=3)
    every_2s = make_gateway("every2", server.url, refresh_interval=2)
    disabled = make_gateway("off", server.url, refresh_interval=2)
    Gateway.objects.filter(pk=disabled.pk).update(enabled=False)
    default = make_gateway("dflt", server.url)  # no interval: the global default

    celery_cluster.env["TOOLSYNC_DEFAULT_REFRESH_INTERVAL"] = "3"
    celery_cluster.worker(concurrency=2)
    celery_cluster.beat()

    def runs(gateway):
        return list(
            RefreshRun.objects.filter(gateway=gateway).order_by("queued_at", "pk")
        )

    first = wait_for(lambda: runs(every_2s), 60, "the first scheduled refresh")[0]
    window_end = first.queued_at + timedelta(seconds=7)
    wait_for(lambda: timezone.now() > window_end + timedelta(seconds=2), 15, "window")

    fast = [r for r in runs(every_2s) if r.queued_at <= window_end]
    assert len(fast) >= 2, celery_cluster.processes[0].log_tail()
    assert all((r.trigger, r.status) == ("schedule", "succeeded") for r in fast)
    assert all(r.applied for r in fast)  # auto_apply is the default policy

    slow = [r for r in runs(default) if r.queued_at <= window_end]
    assert len(slow) >= 2
    assert all((r.trigger, r.status) == ("schedule", "succeeded") for r in slow)
    gaps = [
        (b.queued_at - a.queued_at).total_seconds()
        for a, b in zip(slow, slow[1:], strict=False)
    ]
    # A 3 s interval on a 1 s sweep grid: about 2 s apart at the closest,
    # never every sweep.
    assert min(gaps) >= 1.5, gaps

    assert runs(disabled) == []
    assert set(active_tools(every_2s)) == set(server.state()["names"])


@pytest.mark.django_db(transaction=True)
def test_a_dead_server_is_skipped_while_down_and_refreshed_on_recovery(
    celery_cluster, mcp_server_factory
):
    server = mcp_server_factory(tools=6)
    gateway = make_gateway(
        "flaky", server.url, refresh_interval=1, deactivate_missing=True
    )
    refresh_gateway(gateway=gateway, trigger="cli", options=RefreshOptions(apply=True))
    before = active_tools(gateway)

    celery_cluster.env.update(
        TOOLSYNC_HEALTH_CHECK_INTERVAL="1",
        TOOLSYNC_UNREACHABLE_AFTER="2",
        TOOLSYNC_HEALTH_CHECK_TIMEOUT="2",
    )
    celery_cluster.worker(concurrency=3)
    celery_cluster.beat()
    wait_for(
        lambda: (
            Gateway.objects.filter(pk=gateway.pk, health="healthy").exists()
            and RefreshRun.objects.filter(
                gateway=gateway, trigger="schedule", status="succeeded"
            ).exists()
        ),
        60,
        "a health check and a scheduled refresh before the kill",
    )

    server.kill()
    wait_for(
        lambda: Gateway.objects.filter(pk=gateway.pk, health="unreachable").exists(),
        30,
        "the gateway to be marked unreachable",
    )
    went_down = timezone.now()
    gateway.refresh_from_db()
    assert gateway.consecutive_failures >= 2
    assert gateway.health_reason.startswith("cannot connect")

    # Change the catalog while the server is down (it reloads its state file).
    catalog = Catalog.from_file(server.state_file)
    catalog.mutate(change=0.5, add=0.5, remove=0.3, seed=11)
    catalog.save(server.state_file)

    wait_for(
        lambda: (
            RefreshRun.objects.filter(
                gateway=gateway, trigger="schedule", queued_at__gt=went_down
            ).count()
            >= 3
        ),
        20,
        "scheduled ticks while down",
    )
    while_down = RefreshRun.objects.filter(
        gateway=gateway, trigger="schedule", queued_at__gt=went_down
    )
    assert {(r.status, r.error_code) for r in while_down} == {
        ("skipped", "gateway_unreachable")
    }
    assert all("unreachable" in r.reason for r in while_down)
    assert active_tools(gateway) == before  # nothing written while down

    server.restart()
    recovery = wait_for(
        lambda: RefreshRun.objects.filter(
            gateway=gateway, trigger="recovery", status="succeeded"
        ).first(),
        40,
        "a recovery refresh after the restart",
    )
    assert recovery.applied
    assert RefreshRun.objects.filter(gateway=gateway, trigger="recovery").count() == 1
    assert active_tools(gateway) == server_tools(server) != before
    gateway.refresh_from_db()
    assert (gateway.health, gateway.consecutive_failures) == ("healthy", 0)


@pytest.mark.django_db(transaction=True)
def test_a_health_check_on_the_worker_completes_while_a_slow_refresh_holds_the_lease(
    celery_cluster, broker, mcp_server_factory
):
    server = mcp_server_factory(tools=4)
    gateway = make_gateway("slowpoke", server.url)
    server.fault("slow", page=0, seconds=10, times=1)
    celery_cluster.worker(queues="refresh", name="refresher", concurrency=1)
    celery_cluster.worker(queues="health", name="checker", concurrency=1)

    send(broker, request_refresh_task, gateway.pk, "schedule")
    wait_for(
        lambda: Gateway.objects.filter(
            pk=gateway.pk, lease_token__isnull=False
        ).exists(),
        30,
        "the slow refresh to take the lease",
    )
    send(broker, check_health_task, gateway.pk)
    wait_for(
        lambda: Gateway.objects.filter(
            pk=gateway.pk, last_health_check_at__isnull=False
        ).exists(),
        20,
        "the health check",
    )
    held = Gateway.objects.get(pk=gateway.pk)
    running = RefreshRun.objects.get(gateway=gateway)
    assert held.health == "healthy"
    assert held.lease_token is not None and running.status == "running"
    wait_for(
        lambda: RefreshRun.objects.filter(gateway=gateway, status="succeeded").exists(),
        40,
        "the slow refresh to finish",
    )


@pytest.mark.django_db(transaction=True)
def test_twenty_scheduled_requests_during_a_refresh_yield_one_follow_up(
    celery_cluster, broker, mcp_server_factory
):
    server = mcp_server_factory(tools=30, page_size=10)
    gateway = make_gateway(
        "busy", server.url, deactivate_missing=True, reactivate_returning=True
    )
    refresh_gateway(gateway=gateway, trigger="cli", options=RefreshOptions(apply=True))
    celery_cluster.worker(concurrency=4)

    server.fault("slow", page=0, seconds=6, times=1)
    send(broker, request_refresh_task, gateway.pk, "schedule")
    holder = wait_for(
        lambda: RefreshRun.objects.filter(
            gateway=gateway, trigger="schedule", status="running"
        ).first(),
        30,
        "the first scheduled refresh to start",
    )
    # Changed mid-run: only a follow-up run can see this.
    server.mutate(change=0.3, add=0.2, remove=0.2, seed=5)

    barrier = threading.Barrier(20)

    def fire() -> None:
        barrier.wait()
        send(broker, request_refresh_task, gateway.pk, "schedule")

    threads = [threading.Thread(target=fire) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def settled():
        runs = RefreshRun.objects.filter(gateway=gateway, trigger="schedule")
        done = runs.exclude(status__in=["queued", "running"]).count()
        return runs.count() == 22 and done == 22

    wait_for(settled, 60, "20 coalesced requests and one follow-up run")
    time.sleep(2.0)  # no pile-up: nothing else arrives afterwards
    runs = list(
        RefreshRun.objects.filter(gateway=gateway, trigger="schedule").order_by("pk")
    )
    assert len(runs) == 22
    coalesced = [r for r in runs if r.error_code == "coalesced"]
    assert len(coalesced) == 20
    assert all(
        r.status == "skipped" and f"run {holder.pk}" in r.reason for r in coalesced
    )
    succeeded = [r for r in runs if r.status == "succeeded"]
    assert [r.pk for r in succeeded][0] == holder.pk and len(succeeded) == 2
    follow_up = succeeded[1]
    assert follow_up.pk > max(r.pk for r in coalesced)  # created when the holder ended
    assert (
        follow_up.applied
        and follow_up.started_at >= RefreshRun.objects.get(pk=holder.pk).finished_at
    )
    gateway.refresh_from_db()
    assert gateway.follow_up_requested is False and gateway.lease_token is None
    assert active_tools(gateway) == server_tools(server)


def _files_by_pid(directory: Path) -> dict[str, list[str]]:
    by_pid: dict[str, list[str]] = {}
    for path in directory.glob("*.db"):
        pid = path.stem.rsplit("_", 1)[-1]
        by_pid.setdefault(pid, []).append(str(path))
    return by_pid


@pytest.mark.django_db(transaction=True)
def test_metrics_are_summed_across_two_worker_processes(
    celery_cluster, broker, mcp_server_factory, client, monkeypatch
):
    good = mcp_server_factory(tools=5)
    endless = mcp_server_factory(tools=5, page_size=1)
    endless.fault("endless")
    dead = mcp_server_factory(tools=1)
    dead_url = dead.url
    dead.kill()
    applied_a = make_gateway("ma", good.url)
    applied_b = make_gateway("mb", good.url)
    dry = make_gateway("md", good.url)
    partial = make_gateway("mi", endless.url)
    gone = make_gateway("mf", dead_url)
    off = make_gateway("mo", good.url)
    Gateway.objects.filter(pk=off.pk).update(enabled=False)

    celery_cluster.env["TOOLSYNC_PROBE_MAX_PAGES"] = "3"
    celery_cluster.worker(queues="metrics_a", name="wa", concurrency=1)
    celery_cluster.worker(queues="metrics_b", name="wb", concurrency=1)

    plan = [
        (applied_a, "schedule", True, "metrics_a"),
        (gone, "schedule", True, "metrics_a"),
        (off, "schedule", True, "metrics_a"),
        (applied_b, "schedule", True, "metrics_b"),
        (dry, "api", False, "metrics_b"),
        (partial, "event", True, "metrics_b"),
    ]
    ids = []
    for gateway, trigger, apply, queue in plan:
        run = refresh_run_create(
            gateway=gateway, trigger=trigger, options=RefreshOptions(apply=apply)
        )
        ids.append(run.pk)
        send(broker, execute_run_task, run.pk, queue=queue)
    wait_for(
        lambda: (
            not RefreshRun.objects.filter(
                pk__in=ids, status__in=["queued", "running"]
            ).exists()
        ),
        60,
        "all six runs",
    )
    outcomes = {RefreshRun.objects.get(pk=pk).outcome for pk in ids}
    assert outcomes == {"applied", "failed", "skipped", "dry_run", "incomplete"}

    directory = Path(celery_cluster.env["PROMETHEUS_MULTIPROC_DIR"])
    per_process = {
        pid: samples_of(files) for pid, files in _files_by_pid(directory).items()
    }
    count = "toolsync_refresh_duration_seconds_count"
    runs_per_process = {
        pid: sum(v for (name, _), v in got.items() if name == count)
        for pid, got in per_process.items()
    }
    contributing = {pid: n for pid, n in runs_per_process.items() if n}
    assert len(contributing) == 2 and sorted(contributing.values()) == [3, 3]

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    got = samples(client.get("/metrics").content.decode())

    def value(name, **labels):
        return got.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value(count, trigger="schedule", outcome="applied") == 2
    assert value(count, trigger="schedule", outcome="failed") == 1
    assert value(count, trigger="schedule", outcome="skipped") == 1
    assert value(count, trigger="api", outcome="dry_run") == 1
    assert value(count, trigger="event", outcome="incomplete") == 1
    assert value("toolsync_refresh_failures_total", reason="connect_failed") == 1
    # Two applied first refreshes of a 5-tool server; the incomplete one
    # applied what it read (3 pages of 1).
    assert value("toolsync_refresh_changes_total", change="added") == 13
    assert (
        value(
            "toolsync_refresh_duration_seconds_bucket",
            trigger="schedule",
            outcome="applied",
            le="+Inf",
        )
        == 2
    )


def samples_of(files: list[str]) -> dict:
    from prometheus_client import CollectorRegistry, generate_latest

    class Files:
        def collect(self):
            return MultiProcessCollector.merge(files, accumulate=True)

    registry = CollectorRegistry()
    registry.register(Files())
    return samples(generate_latest(registry).decode())
