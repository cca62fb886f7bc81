"""Health checks (SPEC 5.2): transitions, recovery, races, and never waiting for a refresh."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import OperationalError, connection, transaction
from django.test import override_settings
from django.utils import timezone

from gateways.models import Gateway
from gateways.services import gateway_create, tenant_get_or_create
from refresh import health, hooks
from refresh.health import check_health, health_record, sweep_health_checks
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.probe import ProbeError
from refresh.schedule import refresh_request
from refresh.services import refresh_gateway
from tests.factories import GatewayFactory


class Probe:
    """A liveness probe that answers or fails as told (for transition tests)."""

    def __init__(self) -> None:
        self.error: ProbeError | None = None
        self.targets: list = []

    def __call__(self, target, timeout) -> None:
        self.targets.append(target)
        if self.error is not None:
            raise self.error


DOWN = ProbeError(
    "cannot connect: connection refused", code="connect_failed", retryable=True
)


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    ids: list[int] = []
    monkeypatch.setattr(hooks, "enqueue_run", ids.append)
    return ids


@pytest.mark.django_db
@override_settings(TOOLSYNC_UNREACHABLE_AFTER=3)
def test_k_consecutive_failures_make_a_gateway_unreachable(gateway):
    probe = Probe()
    probe(None, 0)  # healthy first
    check_health(gateway_id=gateway.pk, probe=probe)
    gateway.refresh_from_db()
    assert gateway.health == "healthy"
    probe.error = DOWN
    results = [check_health(gateway_id=gateway.pk, probe=probe) for _ in range(3)]
    gateway.refresh_from_db()
    assert [r.after for r in results] == ["healthy", "healthy", "unreachable"]
    assert [r.transition for r in results] == [None, None, "healthy->unreachable"]
    assert gateway.health == "unreachable"
    assert gateway.consecutive_failures == 3
    assert gateway.health_reason == DOWN.message
    assert gateway.last_health_check_at is not None
    # Further failures keep counting; no second transition.
    assert check_health(gateway_id=gateway.pk, probe=probe).transition is None
    gateway.refresh_from_db()
    assert (gateway.health, gateway.consecutive_failures) == ("unreachable", 4)


@pytest.mark.django_db
@override_settings(TOOLSYNC_UNREACHABLE_AFTER=3)
def test_a_success_resets_the_failure_count(gateway):
    probe = Probe()
    probe.error = DOWN
    check_health(gateway_id=gateway.pk, probe=probe)
    check_health(gateway_id=gateway.pk, probe=probe)
    probe.error = None
    check_health(gateway_id=gateway.pk, probe=probe)
    probe.error = DOWN
    check_health(gateway_id=gateway.pk, probe=probe)
    gateway.refresh_from_db()
    assert (gateway.health, gateway.consecutive_failures) == ("healthy", 1)


@pytest.mark.django_db
def test_recovery_records_one_recovery_run_with_the_policy(
    enqueued, django_capture_on_commit_callbacks
):
    gateway = GatewayFactory(
        health="unreachable",
        consecutive_failures=5,
        auto_apply=True,
        include_resources=True,
    )
    with django_capture_on_commit_callbacks(execute=True):
        result = check_health(gateway_id=gateway.pk, probe=Probe())
    assert result.transition == "unreachable->healthy"
    run = RefreshRun.objects.get(gateway=gateway)
    assert (run.trigger, run.status) == ("recovery", "queued")
    assert run.options["apply"] is True and run.options["include_resources"] is True
    assert enqueued == [run.pk] == [result.recovery_run_id]
    gateway.refresh_from_db()
    assert (gateway.health, gateway.consecutive_failures) == ("healthy", 0)
    # Healthy stays healthy: no more recovery runs.
    with django_capture_on_commit_callbacks(execute=True):
        check_health(gateway_id=gateway.pk, probe=Probe())
    assert RefreshRun.objects.count() == 1


@pytest.mark.django_db
def test_disabled_or_missing_gateways_are_not_checked():
    probe = Probe()
    disabled = GatewayFactory(enabled=False)
    assert check_health(gateway_id=disabled.pk, probe=probe) is None
    assert check_health(gateway_id=10**9, probe=probe) is None
    assert probe.targets == []


@pytest.mark.django_db
@override_settings(TOOLSYNC_HEALTH_CHECK_INTERVAL=60)
def test_health_sweep_claims_due_checks_once(
    monkeypatch, django_capture_on_commit_callbacks
):
    sent: list[list[int]] = []
    monkeypatch.setattr(health, "_enqueue_checks", sent.append)
    now = timezone.now()
    due = GatewayFactory(next_health_check_at=now - timedelta(seconds=1))
    never = GatewayFactory(next_health_check_at=None, health="unreachable")
    GatewayFactory(next_health_check_at=now + timedelta(seconds=10))
    GatewayFactory(enabled=False)
    with django_capture_on_commit_callbacks(execute=True):
        assert sweep_health_checks(now=now) == 2
    # Unreachable gateways keep being checked.
    assert sorted(sent[0]) == sorted([due.pk, never.pk])
    due.refresh_from_db()
    assert due.next_health_check_at == now + timedelta(seconds=60)
    with django_capture_on_commit_callbacks(execute=True):
        assert sweep_health_checks(now=now) == 0


@pytest.mark.django_db
def test_a_server_refusing_credentials_is_up_and_the_secret_stays_out(
    mcp_server_factory,
):
    server = mcp_server_factory(tools=1, require_bearer="the-right-one")
    tenant = tenant_get_or_create(slug="health-auth")
    gateway = gateway_create(
        tenant=tenant,
        name="auth",
        prefix="auth",
        url=server.url,
        auth_type="bearer",
        auth_token="wrong-secret-token",
    )
    result = check_health(gateway_id=gateway.pk)
    gateway.refresh_from_db()
    assert result.up and gateway.health == "healthy"
    assert gateway.health_reason.startswith("answered, but the server refused")
    assert "wrong-secret-token" not in gateway.health_reason
    assert any(
        h["authorization"] == "Bearer wrong-secret-token" for h in server.seen_auth()
    )


@pytest.mark.django_db
def test_an_as_caller_gateway_is_checked_without_any_credential(mcp_server_factory):
    server = mcp_server_factory(tools=1)
    gateway = gateway_create(
        tenant=tenant_get_or_create(slug="health-caller"),
        name="caller",
        prefix="caller",
        url=server.url,
        auth_type="as_caller",
    )
    assert check_health(gateway_id=gateway.pk).up
    assert all(h["authorization"] is None for h in server.seen_auth())


@pytest.mark.django_db
@override_settings(TOOLSYNC_UNREACHABLE_AFTER=1, TOOLSYNC_HEALTH_CHECK_TIMEOUT=2.0)
def test_a_hostile_answer_is_recorded_as_down_with_its_reason(mcp_server_factory):
    server = mcp_server_factory(tools=1)
    gateway = GatewayFactory(url=server.base_url + "/not-mcp")
    result = check_health(gateway_id=gateway.pk)
    gateway.refresh_from_db()
    assert not result.up and gateway.health == "unreachable"
    assert "no MCP endpoint at this URL (HTTP 404)" in gateway.health_reason


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_successes_record_exactly_one_recovery(enqueued):
    gateway = GatewayFactory(health="unreachable", consecutive_failures=4)
    results = _race(
        10,
        lambda: health_record(gateway=gateway, up=True, reason="", now=timezone.now()),
    )
    assert [r.transition for r in results].count("unreachable->healthy") == 1
    assert RefreshRun.objects.filter(gateway=gateway, trigger="recovery").count() == 1
    assert len(enqueued) == 1
    gateway.refresh_from_db()
    assert (gateway.health, gateway.consecutive_failures) == ("healthy", 0)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@override_settings(TOOLSYNC_UNREACHABLE_AFTER=3)
def test_concurrent_failures_count_every_one_and_transition_once():
    gateway = GatewayFactory(health="healthy")
    results = _race(
        12,
        lambda: health_record(
            gateway=gateway, up=False, reason="x", now=timezone.now()
        ),
    )
    assert [r.transition for r in results].count("healthy->unreachable") == 1
    gateway.refresh_from_db()
    assert (gateway.health, gateway.consecutive_failures) == ("unreachable", 12)


def _race(n, fn):
    barrier = threading.Barrier(n)
    results, errors = [], []

    def run() -> None:
        try:
            barrier.wait()
            results.append(fn())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return results


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_health_check_completes_while_a_slow_refresh_holds_the_lease(
    mcp_server_factory,
):
    server = mcp_server_factory(tools=5)
    gateway = gateway_create(
        tenant=tenant_get_or_create(slug="health-slow"),
        name="slow",
        prefix="slow",
        url=server.url,
    )
    server.fault("slow", page=0, seconds=8, times=1)
    refresh = threading.Thread(
        target=lambda: (
            refresh_request(gateway_id=gateway.pk, trigger="schedule"),
            connection.close(),
        )
    )
    refresh.start()
    try:
        _wait(
            lambda: Gateway.objects.filter(
                pk=gateway.pk, lease_token__isnull=False
            ).exists()
        )
        result = check_health(gateway_id=gateway.pk)
        # Done while the refresh is still probing: the check did not wait.
        held = Gateway.objects.get(pk=gateway.pk)
        running = RefreshRun.objects.get(gateway=gateway, trigger="schedule")
        assert result.up and held.health == "healthy"
        assert held.lease_token is not None and running.status == "running"
    finally:
        refresh.join()
    assert (
        RefreshRun.objects.get(gateway=gateway, trigger="schedule").status
        == "succeeded"
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_health_write_waits_only_briefly_for_a_locked_row(monkeypatch):
    """A transaction holding the gateway row far longer than any apply does."""
    monkeypatch.setattr(health, "LOCK_TIMEOUT_MS", 200)
    gateway = GatewayFactory(health="healthy")
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            Gateway.objects.select_for_update().get(pk=gateway.pk)
            locked.set()
            release.wait(30)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        with pytest.raises(OperationalError, match="lock timeout"):
            health_record(gateway=gateway, up=False, reason="x", now=timezone.now())
    finally:
        release.set()
        holder.join()
    # Once the lock is gone the same write goes through.
    health_record(gateway=gateway, up=False, reason="x", now=timezone.now())
    gateway.refresh_from_db()
    assert gateway.consecutive_failures == 1


def _wait(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached")
        time.sleep(0.05)


@pytest.mark.django_db
def test_recovery_run_applies_what_changed(
    mcp_server_factory, enqueued, django_capture_on_commit_callbacks
):
    server = mcp_server_factory(tools=6)
    gateway = gateway_create(
        tenant=tenant_get_or_create(slug="health-rec"),
        name="rec",
        prefix="rec",
        url=server.url,
        deactivate_missing=True,
    )
    refresh_gateway(gateway=gateway, trigger="cli", options=RefreshOptions(apply=True))
    Gateway.objects.filter(pk=gateway.pk).update(
        health="unreachable", consecutive_failures=3
    )
    server.mutate(change=0.3, add=0.3, remove=0.3, seed=7)
    with django_capture_on_commit_callbacks(execute=True):
        result = check_health(gateway_id=gateway.pk)
    from refresh.services import refresh_run_execute

    run = refresh_run_execute(run=RefreshRun.objects.get(pk=result.recovery_run_id))
    assert (run.trigger, run.status, run.applied) == ("recovery", "succeeded", True)
    names = set(gateway.tools.filter(active=True).values_list("name", flat=True))
    assert names == set(server.state()["names"])
