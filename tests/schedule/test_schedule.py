"""The due-gateway sweep (SPEC 5.2), in process: claims, policy, skips, pile-up, races."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from gateways.models import Gateway
from refresh import schedule
from refresh.lease import lease_acquire
from refresh.models import RefreshRun
from refresh.schedule import (
    fail_stale_queued_runs,
    gateway_reschedule,
    next_due,
    percentile,
    refresh_request,
    sweep_due_gateways,
)
from refresh.services import UNREACHABLE_SKIP_REASON
from tests.factories import GatewayFactory, RefreshRunFactory

S = timedelta(seconds=1)


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Run ids the sweep hands to the broker (tests here run no worker)."""
    ids: list[int] = []
    monkeypatch.setattr(schedule, "enqueue_runs", ids.extend)
    return ids


def test_next_due_steps_on_the_gateways_own_grid():
    now = timezone.now()
    assert next_due(None, 60, now) == now + 60 * S
    # Due a second ago: the next one is on the same grid, not now + 60.
    assert next_due(now - 1 * S, 60, now) == now + 59 * S
    # Exactly due.
    assert next_due(now, 60, now) == now + 60 * S
    # Beat was down for 2.5 intervals: no burst of missed ticks, the next
    # grid point after now.
    assert next_due(now - 150 * S, 60, now) == now + 30 * S
    assert next_due(now - 120 * S, 60, now) == now + 60 * S


def test_percentile_is_nearest_rank():
    assert percentile([], 95) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0


@pytest.mark.django_db
@override_settings(TOOLSYNC_DEFAULT_REFRESH_INTERVAL=120)
def test_sweep_records_a_schedule_run_per_due_gateway_with_its_policy(
    enqueued, django_capture_on_commit_callbacks
):
    now = timezone.now()
    due = GatewayFactory(
        next_refresh_at=now - 5 * S,
        refresh_interval=60,
        auto_apply=False,
        include_prompts=True,
        deactivate_missing=True,
    )
    never_scheduled = GatewayFactory(next_refresh_at=None)
    later = GatewayFactory(next_refresh_at=now + 30 * S)
    disabled = GatewayFactory(enabled=False, next_refresh_at=now - 5 * S)

    with django_capture_on_commit_callbacks(execute=True):
        result = sweep_due_gateways(now=now)

    runs = {r.gateway_id: r for r in RefreshRun.objects.all()}
    assert set(runs) == {due.pk, never_scheduled.pk}
    assert sorted(enqueued) == sorted(r.pk for r in runs.values())
    assert result.enqueued == 2 and result.skipped_unreachable == 0
    run = runs[due.pk]
    assert run.trigger == "schedule" and run.status == "queued"
    assert run.options == {
        "apply": False,
        "apply_effect": False,
        "deactivate_missing": True,
        "reactivate_returning": False,
        "include_prompts": True,
        "include_resources": False,
    }
    assert runs[never_scheduled.pk].options["apply"] is True  # auto_apply default on
    due.refresh_from_db()
    never_scheduled.refresh_from_db()
    later.refresh_from_db()
    disabled.refresh_from_db()
    assert due.next_refresh_at == now + 55 * S  # its own 60 s grid
    assert never_scheduled.next_refresh_at == now + 120 * S  # the global default
    assert later.next_refresh_at == now + 30 * S
    assert disabled.next_refresh_at == now - 5 * S  # disabled: never touched
    assert result.delays == [pytest.approx(5.0, abs=1.0)]

    # Nothing is due any more at the same moment.
    with django_capture_on_commit_callbacks(execute=True):
        again = sweep_due_gateways(now=now)
    assert again.enqueued == 0 and RefreshRun.objects.count() == 2


@pytest.mark.django_db
def test_sweep_records_unreachable_gateways_as_skipped_without_a_worker(
    enqueued, django_capture_on_commit_callbacks
):
    now = timezone.now()
    down = GatewayFactory(
        next_refresh_at=now - S, refresh_interval=30, health="unreachable"
    )
    with django_capture_on_commit_callbacks(execute=True):
        result = sweep_due_gateways(now=now)
    run = RefreshRun.objects.get(gateway=down)
    assert (run.trigger, run.status) == ("schedule", "skipped")
    assert run.reason == UNREACHABLE_SKIP_REASON
    assert run.error_code == "gateway_unreachable"
    assert run.finished_at is not None and not run.applied
    assert enqueued == [] and result.skipped_unreachable == 1
    down.refresh_from_db()
    assert down.next_refresh_at == now + 29 * S


@pytest.mark.django_db
def test_sweep_does_not_pile_up_behind_a_run_still_queued(
    enqueued, django_capture_on_commit_callbacks
):
    now = timezone.now()
    busy = GatewayFactory(next_refresh_at=now - S, refresh_interval=60)
    waiting = RefreshRunFactory(gateway=busy, trigger="event")
    manual_only = GatewayFactory(next_refresh_at=now - S, refresh_interval=60)
    RefreshRunFactory(gateway=manual_only, trigger="api")  # does not count
    with django_capture_on_commit_callbacks(execute=True):
        result = sweep_due_gateways(now=now)
    assert result.already_queued == 1 and result.enqueued == 1
    assert list(
        RefreshRun.objects.filter(gateway=busy).values_list("pk", flat=True)
    ) == [waiting.pk]
    busy.refresh_from_db()
    assert busy.next_refresh_at == now + 59 * S  # the tick is consumed, not replayed
    assert (
        RefreshRun.objects.filter(gateway=manual_only, trigger="schedule").count() == 1
    )


@pytest.mark.django_db
@override_settings(TOOLSYNC_QUEUED_RUN_MAX_AGE=60)
def test_a_lost_queued_run_is_failed_and_replaced_by_the_next_tick(
    enqueued, django_capture_on_commit_callbacks
):
    now = timezone.now()
    gateway = GatewayFactory(next_refresh_at=now - S, refresh_interval=60)
    lost = RefreshRunFactory(gateway=gateway, trigger="schedule")
    RefreshRun.objects.filter(pk=lost.pk).update(queued_at=now - 61 * S)
    manual = RefreshRunFactory(
        gateway=GatewayFactory(next_refresh_at=now + 60 * S), trigger="cli"
    )
    RefreshRun.objects.filter(pk=manual.pk).update(queued_at=now - 3600 * S)

    with django_capture_on_commit_callbacks(execute=True):
        result = sweep_due_gateways(now=now)

    lost.refresh_from_db()
    assert (lost.status, lost.error_code) == ("failed", "not_picked_up")
    assert "no worker picked this run up within 60 s" in lost.reason
    assert result.stale_failed == 1 and result.enqueued == 1
    fresh = RefreshRun.objects.filter(gateway=gateway, status="queued").get()
    assert enqueued == [fresh.pk]
    manual.refresh_from_db()
    assert manual.status == "queued"  # manual runs are not the schedule's to fail
    assert fail_stale_queued_runs(now=now) == 0


@pytest.mark.django_db
def test_sweep_takes_every_due_gateway_in_batches(
    enqueued, django_capture_on_commit_callbacks
):
    now = timezone.now()
    gateways = [GatewayFactory(next_refresh_at=now - i * S) for i in range(1, 8)]
    with django_capture_on_commit_callbacks(execute=True):
        result = sweep_due_gateways(now=now, batch_size=3)
    assert result.enqueued == 7 and result.batches == 3
    assert set(RefreshRun.objects.values_list("gateway_id", flat=True)) == {
        g.pk for g in gateways
    }


@pytest.mark.django_db
def test_sweep_query_count_does_not_grow_with_the_batch(
    enqueued, django_assert_max_num_queries, django_capture_on_commit_callbacks
):
    now = timezone.now()
    for i in range(50):
        GatewayFactory(next_refresh_at=now - i * S)
    # stale check, claim, pending runs, bulk update, bulk insert, empty claim
    with django_assert_max_num_queries(8):
        with django_capture_on_commit_callbacks(execute=True):
            result = sweep_due_gateways(now=now)
    assert result.enqueued == 50


@pytest.mark.django_db
def test_reschedule_after_an_interval_edit(settings):
    now = timezone.now()
    gateway = GatewayFactory(refresh_interval=3600, last_refresh_at=now - 600 * S)
    gateway.refresh_interval = 60  # shortened: the refresh is overdue, so now
    assert gateway_reschedule(gateway=gateway, now=now) == now
    gateway.refresh_interval = 7200  # lengthened: one new interval after the last
    assert gateway_reschedule(gateway=gateway, now=now) == now + 6600 * S
    gateway.refresh_from_db()
    assert gateway.next_refresh_at == now + 6600 * S
    gateway.refresh_interval = None  # back to the global default
    settings.TOOLSYNC_DEFAULT_REFRESH_INTERVAL = 900
    assert gateway_reschedule(gateway=gateway, now=now) == now + 300 * S
    never = GatewayFactory()
    assert gateway_reschedule(gateway=never, now=now) == now


@pytest.mark.django_db
def test_refresh_request_is_not_for_manual_triggers(gateway):
    with pytest.raises(ValueError, match="manual trigger"):
        refresh_request(gateway_id=gateway.pk, trigger="api")
    assert refresh_request(gateway_id=10**9, trigger="event") is None


@pytest.mark.django_db
def test_refresh_request_while_leased_is_coalesced_durably(gateway, fake_probe):
    holder = RefreshRunFactory(gateway=gateway, trigger="schedule")
    assert lease_acquire(gateway_id=gateway.pk, run_id=holder.pk).acquired
    run = refresh_request(gateway_id=gateway.pk, trigger="event", include_prompts=True)
    assert (run.status, run.error_code) == ("skipped", "coalesced")
    assert f"run {holder.pk}" in run.reason
    assert fake_probe.calls == []
    gateway.refresh_from_db()
    assert gateway.follow_up_requested is True
    assert gateway.follow_up_trigger == "event"
    assert gateway.follow_up_options["include_prompts"] is True


@pytest.mark.django_db
def test_refresh_request_for_a_disabled_gateway_is_skipped(fake_probe):
    gateway = GatewayFactory(enabled=False)
    run = refresh_request(gateway_id=gateway.pk, trigger="schedule")
    assert (run.status, run.error_code) == ("skipped", "gateway_disabled")
    assert fake_probe.calls == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_sweeps_claim_each_gateway_exactly_once(enqueued):
    now = timezone.now()
    Gateway.objects.bulk_create(
        GatewayFactory.build(tenant=GatewayFactory().tenant, next_refresh_at=now - S)
        for _ in range(199)
    )
    due = Gateway.objects.count()
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            barrier.wait()
            sweep_due_gateways(now=now, batch_size=10, max_batches=100)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    gateway_ids = list(RefreshRun.objects.values_list("gateway_id", flat=True))
    assert len(gateway_ids) == due == len(set(gateway_ids))
    assert len(enqueued) == due
    assert not Gateway.objects.filter(next_refresh_at__lte=now).exists()
