"""Celery tasks: thin adapters that load a row by primary key and call one service.

Task names are explicit (beat and brokers store them as text); routes to the
`refresh`, `health` and `schedule` queues are in `project/celery.py`. Refresh
tasks are not retried: a failed run is recorded with its reason and the next
scheduled tick (or the recovery refresh) tries again with a fresh run.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from refresh import health, schedule, services
from refresh.models import RefreshRun

logger = logging.getLogger(__name__)

_HEALTH_SOFT_LIMIT = int(settings.TOOLSYNC_HEALTH_CHECK_TIMEOUT) + 10
_SWEEP_SOFT_LIMIT = 60


@shared_task(name="refresh.execute_run")
def execute_run_task(run_id: int) -> str:
    """Execute a queued refresh run."""
    run = RefreshRun.objects.select_related("gateway").filter(pk=run_id).first()
    if run is None:
        logger.warning("refresh run %s no longer exists", run_id)
        return "missing"
    run = services.refresh_run_execute(run=run)
    return run.status


@shared_task(name="refresh.request_refresh")
def request_refresh_task(
    gateway_id: int,
    trigger: str = RefreshRun.Trigger.EVENT,
    include_prompts: bool = False,
    include_resources: bool = False,
) -> str:
    """A non-manual refresh request (event, schedule, recovery); coalesced if busy."""
    run = schedule.refresh_request(
        gateway_id=gateway_id,
        trigger=trigger,
        include_prompts=include_prompts,
        include_resources=include_resources,
    )
    return "missing" if run is None else f"run {run.pk} {run.status}"


@shared_task(
    name="refresh.sweep_due_gateways",
    soft_time_limit=_SWEEP_SOFT_LIMIT,
    time_limit=_SWEEP_SOFT_LIMIT + 30,
)
def sweep_due_gateways_task() -> str:
    """Enqueue the gateways whose scheduled refresh is due."""
    return schedule.sweep_due_gateways().summary()


@shared_task(
    name="refresh.sweep_health_checks",
    soft_time_limit=_SWEEP_SOFT_LIMIT,
    time_limit=_SWEEP_SOFT_LIMIT + 30,
)
def sweep_health_checks_task() -> str:
    """Enqueue the gateways whose health check is due."""
    return f"enqueued {health.sweep_health_checks()} health checks"


@shared_task(
    name="refresh.check_health",
    soft_time_limit=_HEALTH_SOFT_LIMIT,
    time_limit=_HEALTH_SOFT_LIMIT + 10,
)
def check_health_task(gateway_id: int) -> str:
    """Run one liveness check and record it."""
    result = health.check_health(gateway_id=gateway_id)
    if result is None:
        return "missing or disabled"
    return f"{'up' if result.up else 'down'} {result.after}"
