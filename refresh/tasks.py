"""Celery tasks: thin adapters that load a row by primary key and call one service."""

from __future__ import annotations

import logging

from celery import shared_task

from refresh import services
from refresh.models import RefreshRun

logger = logging.getLogger(__name__)


@shared_task(name="refresh.execute_run")
def execute_run_task(run_id: int) -> str:
    """Execute a queued refresh run."""
    run = RefreshRun.objects.select_related("gateway").filter(pk=run_id).first()
    if run is None:
        logger.warning("refresh run %s no longer exists", run_id)
        return "missing"
    run = services.refresh_run_execute(run=run)
    return run.status
