"""Health checks (SPEC 5.2): liveness per gateway, never waiting for a refresh.

Beat sends `refresh.sweep_health_checks` every TOOLSYNC_SCHEDULE_SWEEP_SECONDS;
it claims the enabled gateways whose `next_health_check_at` has passed (SKIP
LOCKED, like the refresh sweep), moves it on by TOOLSYNC_HEALTH_CHECK_INTERVAL
and enqueues one `refresh.check_health` per gateway on the `health` queue.

A check is one cheap, era-appropriate liveness probe (`refresh.probe.
check_liveness`), bounded by TOOLSYNC_HEALTH_CHECK_TIMEOUT. Its result is
written with conditional UPDATEs on the gateway row, never under the refresh
lease: the lease is a token, not a lock, and a refresh holds the row lock
only for its short lease and apply transactions (never across the network),
so a check finishes while a slow refresh is probing.

Transitions (see `Gateway`): a success makes the gateway `healthy` and resets
the failure count; the K-th consecutive failure (TOOLSYNC_UNREACHABLE_AFTER)
makes it `unreachable`; the first success after `unreachable` records a
`recovery` run in the same transaction and enqueues it after commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from gateways.crypto import CredentialError
from gateways.models import Gateway
from gateways.services import (
    GatewayConfigError,
    gateway_probe_target,
    gateway_secret_values,
)
from refresh import hooks, metrics
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.probe import ProbeError, ProbeTarget, check_liveness, scrub_secrets
from refresh.services import refresh_run_create

logger = logging.getLogger("toolsync.health")

Health = Gateway.Health
T = TypeVar("T")

# A refresh's apply transaction holds the gateway row for milliseconds to a
# second or two; a health write waits at most this long per attempt.
LOCK_TIMEOUT_MS = 2000
LOCK_ATTEMPTS = 3


@dataclass(frozen=True)
class HealthResult:
    """One check: up or down, why, and the transition it caused (if any)."""

    gateway_id: int
    up: bool
    reason: str
    before: str
    after: str
    recovery_run_id: int | None = None
    latency_ms: int | None = None

    @property
    def transition(self) -> str | None:
        return f"{self.before}->{self.after}" if self.before != self.after else None


def sweep_health_checks(
    *,
    now: datetime | None = None,
    batch_size: int | None = None,
    max_batches: int = 20,
) -> int:
    """Claim the gateways whose check is due and enqueue one check each."""
    batch_size = batch_size or settings.TOOLSYNC_SCHEDULE_BATCH_SIZE
    interval = timedelta(seconds=settings.TOOLSYNC_HEALTH_CHECK_INTERVAL)
    total = 0
    for _ in range(max_batches):
        at = now or timezone.now()
        with transaction.atomic():
            # SKIP LOCKED: concurrent sweeps take disjoint gateways and never
            # wait on a row a refresh has locked for its apply.
            ids = list(
                Gateway.objects.select_for_update(skip_locked=True)
                .filter(enabled=True)
                .filter(
                    Q(next_health_check_at__isnull=True)
                    | Q(next_health_check_at__lte=at)
                )
                .order_by("next_health_check_at", "pk")
                .values_list("pk", flat=True)[:batch_size]
            )
            if ids:
                Gateway.objects.filter(pk__in=ids).update(
                    next_health_check_at=at + interval
                )
                transaction.on_commit(lambda ids=ids: _enqueue_checks(ids))
        total += len(ids)
        if len(ids) < batch_size:
            break
    return total


def _enqueue_checks(gateway_ids: list[int]) -> None:
    from refresh.tasks import check_health_task

    # A check that waited longer than one interval is superseded by the next.
    expires = settings.TOOLSYNC_HEALTH_CHECK_INTERVAL
    try:
        with check_health_task.app.producer_or_acquire() as producer:
            for gateway_id in gateway_ids:
                check_health_task.apply_async(
                    (gateway_id,), producer=producer, expires=expires
                )
    except Exception:  # noqa: BLE001 - the next interval claims them again
        logger.exception("could not enqueue %d health checks", len(gateway_ids))


def liveness_target(gateway: Gateway) -> ProbeTarget:
    """Where to send the liveness probe, with the gateway's own credentials.

    A gateway that authenticates as the caller has no stored credential; its
    check goes out without one, and a refusal (HTTP 401) still proves the
    server is up.
    """
    try:
        return gateway_probe_target(gateway)
    except (GatewayConfigError, CredentialError):
        return ProbeTarget(
            transport=gateway.transport,
            url=gateway.url,
            command=gateway.command,
            args=tuple(str(a) for a in gateway.args),
            env={str(k): str(v) for k, v in (gateway.env or {}).items()},
            era=gateway.protocol_era,
        )


def check_health(
    *,
    gateway_id: int,
    now: datetime | None = None,
    probe: Callable[[ProbeTarget, float], object] = check_liveness,
) -> HealthResult | None:
    """Probe one gateway's liveness and record the result; None if gone or disabled."""
    gateway = Gateway.objects.filter(pk=gateway_id).first()
    if gateway is None or not gateway.enabled:
        return None
    target = liveness_target(gateway)
    started = time.monotonic()
    try:
        probe(target, settings.TOOLSYNC_HEALTH_CHECK_TIMEOUT)
        up, reason = True, ""
    except ProbeError as exc:
        secrets = [*target.secrets, *gateway_secret_values(gateway)]
        message = scrub_secrets(exc.message, secrets)[:500]
        # A server that refuses our credentials is up: health is about
        # reachability; the refresh reports the authentication failure.
        up = exc.code == "auth_failed"
        reason = f"answered, but {message}" if up else message
    latency_ms = int((time.monotonic() - started) * 1000)
    result = health_record(
        gateway=gateway, up=up, reason=reason, now=now or timezone.now()
    )
    result = replace(result, latency_ms=latency_ms)
    metrics.health_checked(up=up)
    if result.transition:
        logger.warning(
            "gateway %s health %s%s%s",
            gateway.pk,
            result.transition,
            f" ({reason})" if reason else "",
            f"; recovery run {result.recovery_run_id}"
            if result.recovery_run_id
            else "",
        )
    return result


def health_record(
    *, gateway: Gateway, up: bool, reason: str, now: datetime
) -> HealthResult:
    """Write one check's result with conditional updates (no lease, no long lock)."""
    if up:
        return _with_short_lock_wait(lambda: _record_up(gateway, reason, now))
    return _with_short_lock_wait(lambda: _record_down(gateway, reason, now))


def _record_up(gateway: Gateway, reason: str, now: datetime) -> HealthResult:
    fields = {
        "health": Health.HEALTHY,
        "consecutive_failures": 0,
        "last_health_check_at": now,
        "health_reason": reason,
    }
    for _ in range(3):
        # Conditional on the state it leaves: exactly one check performs
        # `unreachable -> healthy`, so exactly one recovery run is recorded,
        # in the same transaction as the transition.
        if Gateway.objects.filter(pk=gateway.pk, health=Health.UNREACHABLE).update(
            **fields
        ):
            run = refresh_run_create(
                gateway=gateway,
                trigger=RefreshRun.Trigger.RECOVERY,
                options=RefreshOptions.from_json(gateway.policy_options()),
            )
            transaction.on_commit(partial(hooks.enqueue_run, run.pk))
            return HealthResult(
                gateway.pk, True, reason, Health.UNREACHABLE, Health.HEALTHY, run.pk
            )
        before = (
            Gateway.objects.filter(pk=gateway.pk)
            .values_list("health", flat=True)
            .first()
        )
        if before is None:
            return HealthResult(
                gateway.pk, True, reason, gateway.health, gateway.health
            )
        # Not unreachable a moment ago; if a failing check made it so in
        # between, this matches nothing and the loop takes the branch above.
        if (
            Gateway.objects.filter(pk=gateway.pk)
            .exclude(health=Health.UNREACHABLE)
            .update(**fields)
        ):
            return HealthResult(gateway.pk, True, reason, before, Health.HEALTHY)
    return HealthResult(gateway.pk, True, reason, gateway.health, gateway.health)


def _record_down(gateway: Gateway, reason: str, now: datetime) -> HealthResult:
    threshold = settings.TOOLSYNC_UNREACHABLE_AFTER
    # One statement: the count and the state move together from the row's
    # current values, whatever other checks of this gateway run at once.
    updated = Gateway.objects.filter(pk=gateway.pk).update(
        consecutive_failures=F("consecutive_failures") + 1,
        health=Case(
            When(
                consecutive_failures__gte=threshold - 1,
                then=Value(Health.UNREACHABLE),
            ),
            default=F("health"),
        ),
        last_health_check_at=now,
        health_reason=reason,
    )
    if not updated:
        return HealthResult(gateway.pk, False, reason, gateway.health, gateway.health)
    # Same transaction, so the row is still ours: exactly the check that
    # reached the threshold sees `failures == threshold` (the transition).
    health, failures = (
        Gateway.objects.filter(pk=gateway.pk)
        .values_list("health", "consecutive_failures")
        .get()
    )
    if health == Health.UNREACHABLE and failures == threshold:
        before = (
            gateway.health if gateway.health != Health.UNREACHABLE else Health.HEALTHY
        )
        return HealthResult(gateway.pk, False, reason, before, health)
    return HealthResult(gateway.pk, False, reason, health, health)


def _with_short_lock_wait(write: Callable[[], T]) -> T:
    """Run `write` in a transaction that waits at most LOCK_TIMEOUT_MS for a row lock."""
    for attempt in range(LOCK_ATTEMPTS):
        try:
            with transaction.atomic(), _lock_timeout():
                return write()
        except OperationalError as exc:
            if "lock timeout" not in str(exc) or attempt + 1 == LOCK_ATTEMPTS:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


@contextmanager
def _lock_timeout() -> Iterator[None]:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # SET LOCAL: only this transaction; the pooled connection keeps
            # its default afterwards.
            cursor.execute(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
    yield
