"""Scheduled refresh (SPEC 5.2): one frequent beat sweep over `Gateway.next_refresh_at`.

Beat sends `refresh.sweep_due_gateways` every TOOLSYNC_SCHEDULE_SWEEP_SECONDS.
A sweep claims the enabled gateways whose `next_refresh_at` has passed (or is
empty: never scheduled), moves each one's `next_refresh_at` on by its own
interval (`refresh_interval`, else TOOLSYNC_DEFAULT_REFRESH_INTERVAL), and
records one `schedule` run per gateway:

- healthy or unknown gateway: a queued run with the gateway's stored policy,
  enqueued on the `refresh` queue after commit;
- unreachable gateway: a run recorded `skipped` with the reason at once (no
  worker time spent on a server known to be down; health checks keep probing
  it and refresh it on recovery);
- a scheduled/event/recovery run of the gateway still queued (workers are
  behind): nothing new; that run will read the catalog when it starts, so the
  request is served without piling up.

Why a sweep and not one PeriodicTask per gateway: docs/scheduling.md has the
measurements at 10,000 gateways.

Concurrency: gateways are claimed with `SELECT ... FOR UPDATE SKIP LOCKED`, so
two sweeps running at once (two workers, a slow sweep overlapping the next)
take disjoint gateways, and a gateway row locked for a moment by a refresh's
apply transaction is simply taken by the next sweep instead of waited for.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from gateways.models import POLICY_FIELDS, Gateway
from refresh import metrics
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import (
    MANUAL_TRIGGERS,
    UNREACHABLE_SKIP_CODE,
    UNREACHABLE_SKIP_REASON,
    log_run,
    refresh_run_create,
    refresh_run_execute,
)

logger = logging.getLogger("toolsync.schedule")

Trigger = RefreshRun.Trigger
Status = RefreshRun.Status

# Only what a sweep reads: the interval, the due time, health and policy.
_SWEEP_FIELDS = ("id", "next_refresh_at", "health", *POLICY_FIELDS)


@dataclass
class SweepResult:
    """What one sweep did; `delays` are due -> enqueued seconds, per gateway."""

    enqueued: int = 0
    skipped_unreachable: int = 0
    already_queued: int = 0
    stale_failed: int = 0
    batches: int = 0
    delays: list[float] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"enqueued {self.enqueued}, skipped (unreachable) "
            f"{self.skipped_unreachable}, already queued {self.already_queued}, "
            f"stale failed {self.stale_failed}"
        )


def interval_seconds(gateway: Gateway) -> int:
    """The gateway's own interval, else the global default."""
    return gateway.refresh_interval or settings.TOOLSYNC_DEFAULT_REFRESH_INTERVAL


def next_due(previous: datetime | None, interval: int, now: datetime) -> datetime:
    """The due time after `previous`, on the gateway's own grid (pure).

    Stepping from the previous due time, not from `now`, keeps a gateway from
    drifting later by the sweep delay every interval. After a long pause (beat
    down), the first due time after `now` is taken: missed ticks are not
    replayed as a burst.
    """
    step = timedelta(seconds=interval)
    if previous is None or previous + step <= now:
        if previous is None:
            return now + step
        missed = math.floor((now - previous) / step)
        return previous + step * (missed + 1)
    return previous + step


def gateway_reschedule(*, gateway: Gateway, now: datetime | None = None) -> datetime:
    """Recompute `next_refresh_at` after the interval (or `enabled`) was edited.

    Admin and API call this after saving a gateway whose `refresh_interval`
    changed: the next refresh falls one new interval after the last refresh,
    and at once if that moment has already passed (a shortened interval takes
    effect now, not after the old one runs out).
    """
    now = now or timezone.now()
    base = gateway.last_refresh_at
    due = (
        now
        if base is None
        else max(now, base + timedelta(seconds=interval_seconds(gateway)))
    )
    Gateway.objects.filter(pk=gateway.pk).update(next_refresh_at=due)
    gateway.next_refresh_at = due
    return due


def sweep_due_gateways(
    *,
    now: datetime | None = None,
    batch_size: int | None = None,
    max_batches: int = 20,
) -> SweepResult:
    """Claim every due gateway (in batches) and record its `schedule` run."""
    batch_size = batch_size or settings.TOOLSYNC_SCHEDULE_BATCH_SIZE
    result = SweepResult()
    result.stale_failed = fail_stale_queued_runs(now=now)
    for _ in range(max_batches):
        claimed = _sweep_batch(now or timezone.now(), batch_size, result)
        result.batches += 1
        if claimed < batch_size:
            break
    if result.enqueued or result.skipped_unreachable or result.stale_failed:
        logger.info("schedule sweep: %s", result.summary())
    return result


def _sweep_batch(now: datetime, batch_size: int, result: SweepResult) -> int:
    max_age = timedelta(seconds=settings.TOOLSYNC_QUEUED_RUN_MAX_AGE)
    skipped: list[RefreshRun] = []
    queued_ids: list[int] = []
    delays: list[float] = []
    with transaction.atomic():
        # SKIP LOCKED: concurrent sweeps take disjoint gateways, and a row a
        # refresh holds for its apply transaction is left for the next sweep
        # instead of waited on (PostgreSQL; SQLite serialises transactions).
        due = list(
            Gateway.objects.select_for_update(skip_locked=True)
            .filter(enabled=True)
            .filter(Q(next_refresh_at__isnull=True) | Q(next_refresh_at__lte=now))
            .order_by("next_refresh_at", "pk")
            .only(*_SWEEP_FIELDS)[:batch_size]
        )
        if not due:
            return 0
        ids = [g.pk for g in due]
        pending = set(
            RefreshRun.objects.filter(
                gateway_id__in=ids, status=Status.QUEUED, queued_at__gt=now - max_age
            )
            .exclude(trigger__in=MANUAL_TRIGGERS)
            .values_list("gateway_id", flat=True)
        )
        runs: list[RefreshRun] = []
        for gateway in due:
            if gateway.next_refresh_at is not None:
                delays.append((now - gateway.next_refresh_at).total_seconds())
            gateway.next_refresh_at = next_due(
                gateway.next_refresh_at, interval_seconds(gateway), now
            )
            if gateway.pk in pending:
                result.already_queued += 1
                continue
            options = RefreshOptions.from_json(gateway.policy_options()).as_json()
            if gateway.health == Gateway.Health.UNREACHABLE:
                runs.append(
                    RefreshRun(
                        gateway_id=gateway.pk,
                        trigger=Trigger.SCHEDULE,
                        options=options,
                        status=Status.SKIPPED,
                        reason=UNREACHABLE_SKIP_REASON,
                        error_code=UNREACHABLE_SKIP_CODE,
                        finished_at=now,
                    )
                )
            else:
                runs.append(
                    RefreshRun(
                        gateway_id=gateway.pk, trigger=Trigger.SCHEDULE, options=options
                    )
                )
        _set_next_refresh(due)
        for run in RefreshRun.objects.bulk_create(runs):
            if run.status == Status.SKIPPED:
                skipped.append(run)
            else:
                queued_ids.append(run.pk)
        transaction.on_commit(lambda: enqueue_runs(queued_ids))
    result.enqueued += len(queued_ids)
    result.skipped_unreachable += len(skipped)
    # Measured after commit: the delay includes the enqueue itself.
    done = timezone.now()
    lag = (done - now).total_seconds()
    batch_delays = [d + lag for d in delays]
    result.delays.extend(batch_delays)
    metrics.schedule_delays(batch_delays)
    for run in skipped:
        log_run(run)
    return len(due)


def _set_next_refresh(gateways: list[Gateway]) -> None:
    """Write each claimed gateway's new due time in one statement."""
    if connection.vendor == "postgresql":
        # bulk_update builds a CASE arm per row (~0.7 ms of Python each);
        # one UPDATE ... FROM unnest() carries the same values as two arrays.
        table = connection.ops.quote_name(Gateway._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} AS g SET next_refresh_at = v.due "
                "FROM unnest(%s::bigint[], %s::timestamptz[]) AS v(id, due) "
                "WHERE g.id = v.id",
                [[g.pk for g in gateways], [g.next_refresh_at for g in gateways]],
            )
        return
    Gateway.objects.bulk_update(gateways, ["next_refresh_at"])


def enqueue_runs(run_ids: list[int]) -> None:
    """Publish one `refresh.execute_run` per run over one broker connection."""
    if not run_ids:
        return
    from refresh.tasks import execute_run_task

    app = execute_run_task.app
    try:
        with app.producer_or_acquire() as producer:
            for run_id in run_ids:
                execute_run_task.apply_async((run_id,), producer=producer)
    except Exception:  # noqa: BLE001 - the runs stay queued; see fail_stale_queued_runs
        logger.exception(
            "could not enqueue %d scheduled runs; they will be failed as stale "
            "after TOOLSYNC_QUEUED_RUN_MAX_AGE and replaced by the next tick",
            len(run_ids),
        )


def fail_stale_queued_runs(*, now: datetime | None = None) -> int:
    """Fail non-manual runs no worker picked up in time (lost message, no worker).

    Without this a lost message would block its gateway's schedule for good
    (a queued run suppresses new scheduled ones); with it, the next tick
    after the failure records a fresh run.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.TOOLSYNC_QUEUED_RUN_MAX_AGE)
    stale = list(
        RefreshRun.objects.filter(status=Status.QUEUED, queued_at__lte=cutoff)
        .exclude(trigger__in=MANUAL_TRIGGERS)
        .values_list("pk", flat=True)[:1000]
    )
    if not stale:
        return 0
    reason = (
        f"no worker picked this run up within {settings.TOOLSYNC_QUEUED_RUN_MAX_AGE} s "
        "(lost message or no worker consuming the refresh queue); the next "
        "scheduled tick records a new run"
    )
    # Conditional on still being queued: a worker that claims the run at this
    # very moment wins, and the run is not failed under it.
    RefreshRun.objects.filter(pk__in=stale, status=Status.QUEUED).update(
        status=Status.FAILED, reason=reason, error_code="not_picked_up", finished_at=now
    )
    failed = list(
        RefreshRun.objects.filter(pk__in=stale, error_code="not_picked_up").only(
            "id", "gateway_id", "trigger", "status", "reason", "error_code",
            "applied", "complete", "summary", "duration_ms", "started_at",
            "finished_at",
        )
    )  # fmt: skip
    for run in failed:
        log_run(run)
    return len(failed)


def refresh_request(
    *,
    gateway_id: int,
    trigger: str,
    include_prompts: bool = False,
    include_resources: bool = False,
) -> RefreshRun | None:
    """A non-manual refresh request (schedule, event, recovery), executed now.

    Uses the gateway's stored policy (SPEC 5.2); `include_*` widen it (a
    prompts/list_changed notification reads prompts). While another run holds
    the lease the request is coalesced: the run is recorded `skipped` and the
    durable follow-up flag makes the holder start exactly one more run.
    Returns None when the gateway no longer exists.
    """
    if trigger in MANUAL_TRIGGERS:
        raise ValueError(f"{trigger!r} is a manual trigger; use refresh_gateway")
    gateway = Gateway.objects.filter(pk=gateway_id).first()
    if gateway is None:
        logger.warning("refresh request for missing gateway %s", gateway_id)
        return None
    policy: dict[str, Any] = gateway.policy_options()
    policy["include_prompts"] = policy["include_prompts"] or include_prompts
    policy["include_resources"] = policy["include_resources"] or include_resources
    run = refresh_run_create(
        gateway=gateway, trigger=trigger, options=RefreshOptions.from_json(policy)
    )
    return refresh_run_execute(run=run)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of `values`; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]
