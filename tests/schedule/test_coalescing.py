"""Coalescing (SPEC 4) as a real race: 20 threads against PostgreSQL during a slow refresh."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from gateways.models import Gateway
from gateways.services import gateway_create, tenant_get_or_create
from refresh import hooks
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.schedule import refresh_request
from refresh.services import refresh_gateway, refresh_run_execute

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _in_thread(
    fn, results: list, errors: list, barrier: threading.Barrier | None = None
):
    def run() -> None:
        try:
            if barrier is not None:
                barrier.wait()
            results.append(fn())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


@pytest.mark.parametrize("trigger", ["schedule", "event", "recovery"])
def test_twenty_racing_requests_during_a_refresh_yield_exactly_one_follow_up(
    mcp_server_factory, monkeypatch, trigger
):
    enqueued: list[int] = []
    monkeypatch.setattr(hooks, "enqueue_run", enqueued.append)
    server = mcp_server_factory(tools=40, page_size=10)
    gateway = gateway_create(
        tenant=tenant_get_or_create(slug="coalesce"),
        name="c",
        prefix=f"c-{trigger}",
        url=server.url,
        deactivate_missing=True,
        reactivate_returning=True,
    )
    refresh_gateway(gateway=gateway, trigger="cli", options=RefreshOptions(apply=True))
    server.fault("slow", page=0, seconds=4, times=1)

    results: list = []
    errors: list = []
    holder = _in_thread(
        lambda: refresh_request(gateway_id=gateway.pk, trigger="schedule"),
        results,
        errors,
    )
    _wait(
        lambda: Gateway.objects.filter(
            pk=gateway.pk, lease_token__isnull=False
        ).exists()
    )
    server.mutate(change=0.25, add=0.25, remove=0.25, seed=3)  # announced mid-run

    barrier = threading.Barrier(20)
    racers = [
        _in_thread(
            lambda: refresh_request(
                gateway_id=gateway.pk, trigger=trigger, include_prompts=True
            ),
            results,
            errors,
            barrier,
        )
        for _ in range(20)
    ]
    for thread in racers:
        thread.join()
    holder.join()
    assert errors == []

    runs = RefreshRun.objects.filter(gateway=gateway).exclude(trigger="cli")
    coalesced = runs.filter(status="skipped", error_code="coalesced")
    assert coalesced.count() == 20
    follow_ups = runs.filter(status="queued")
    assert follow_ups.count() == 1 and enqueued == [follow_ups.get().pk]
    follow_up = follow_ups.get()
    assert follow_up.trigger == trigger
    # The follow-up carries the stored policy widened by what was asked.
    assert follow_up.options["deactivate_missing"] is True
    assert follow_up.options["include_prompts"] is True
    gateway.refresh_from_db()
    assert gateway.follow_up_requested is False  # picked up exactly once

    done = refresh_run_execute(run=follow_up)
    assert done.status == "succeeded" and done.applied
    served = {t["name"]: t.get("description") for t in server.snapshot()["tools"]}
    assert (
        dict(gateway.tools.filter(active=True).values_list("name", "description"))
        == served
    )
    assert enqueued == [follow_up.pk]  # the follow-up asked for no further run
    assert not RefreshRun.objects.filter(status__in=["queued", "running"]).exists()


def test_a_request_arriving_as_the_holder_finishes_is_never_lost(
    mcp_server_factory, monkeypatch
):
    """Requests spread over the whole run: each one is coalesced or runs itself."""
    enqueued: list[int] = []
    monkeypatch.setattr(hooks, "enqueue_run", enqueued.append)
    server = mcp_server_factory(tools=10)
    gateway = gateway_create(
        tenant=tenant_get_or_create(slug="coalesce-late"),
        name="late",
        prefix="late",
        url=server.url,
    )
    server.fault("slow", page=0, seconds=1, times=1)
    results: list = []
    errors: list = []
    threads = [
        _in_thread(
            lambda: refresh_request(gateway_id=gateway.pk, trigger="schedule"),
            results,
            errors,
        )
    ]
    for _ in range(30):
        time.sleep(0.05)
        threads.append(
            _in_thread(
                lambda: refresh_request(gateway_id=gateway.pk, trigger="event"),
                results,
                errors,
            )
        )
    for thread in threads:
        thread.join()
    assert errors == []
    statuses = [r.status for r in results]
    # Every request either refreshed itself or was folded into a refresh
    # that was followed by exactly one more run: one queued follow-up per
    # holder that absorbed requests, and no flag left set.
    coalesced_into = {
        int(r.reason.split("run ")[1].split(" ")[0])
        for r in results
        if r.error_code == "coalesced"
    }
    assert set(statuses) <= {"succeeded", "skipped"}
    gateway.refresh_from_db()
    pending = list(RefreshRun.objects.filter(gateway=gateway, status="queued"))
    assert coalesced_into and len(pending) == len(coalesced_into)
    holders = RefreshRun.objects.filter(pk__in=coalesced_into)
    assert all(h.status == "succeeded" for h in holders)
    assert gateway.follow_up_requested is False
    assert sorted(enqueued) == sorted(r.pk for r in pending)
