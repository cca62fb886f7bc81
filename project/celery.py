"""The Celery application: queues, routes, beat entries and process hooks.

Serialisation, acknowledgement and time limits come from Django settings
(`CELERY_*` in `project/settings.py`); this module adds what is structural:

- Queues: `refresh` (catalog refreshes: long, network-bound), `health`
  (liveness checks: short, bounded by TOOLSYNC_HEALTH_CHECK_TIMEOUT) and
  `schedule` (the two beat sweeps: database only, milliseconds). Sweeps get a
  queue of their own so a backlog of refreshes or checks never delays the
  schedule itself. A worker started without `-Q` consumes all three.
- Beat entries (django-celery-beat's DatabaseScheduler upserts them by name
  whenever beat starts): the due-gateway sweep and the health sweep, every
  TOOLSYNC_SCHEDULE_SWEEP_SECONDS, each expiring after a few seconds so a
  stopped worker does not come back to a pile of stale sweeps.
- Prometheus multiprocess mode: PROMETHEUS_MULTIPROC_DIR gets its default
  here, because this module is the first code every process runs (`project`
  imports it before `project.settings` is read) and the variable must be set
  before anything imports prometheus_client.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from celery import Celery, signals
from kombu import Queue

import project.broker  # noqa: F401 - registers the atomic `filesystem://` transport

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

_VAR_DIR = Path(
    os.environ.get("TOOLSYNC_VAR_DIR") or Path(__file__).resolve().parent.parent / "var"
)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(_VAR_DIR / "prometheus"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

QUEUE_REFRESH = "refresh"
QUEUE_HEALTH = "health"
QUEUE_SCHEDULE = "schedule"

TASK_ROUTES = {
    "refresh.execute_run": {"queue": QUEUE_REFRESH},
    "refresh.request_refresh": {"queue": QUEUE_REFRESH},
    "refresh.check_health": {"queue": QUEUE_HEALTH},
    "refresh.sweep_due_gateways": {"queue": QUEUE_SCHEDULE},
    "refresh.sweep_health_checks": {"queue": QUEUE_SCHEDULE},
}

app = Celery("toolsync")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_queues=(Queue(QUEUE_REFRESH), Queue(QUEUE_HEALTH), Queue(QUEUE_SCHEDULE)),
    task_default_queue=QUEUE_REFRESH,
    task_routes=TASK_ROUTES,
)


def beat_schedule() -> dict[str, dict[str, Any]]:
    """The beat entries, from the TOOLSYNC_* settings."""
    from django.conf import settings

    every = settings.TOOLSYNC_SCHEDULE_SWEEP_SECONDS
    # Checks fall due once per TOOLSYNC_HEALTH_CHECK_INTERVAL (60 s): a
    # 5-second grid is precise enough and costs beat a fifth of the sends.
    health_every = max(every, min(5, settings.TOOLSYNC_HEALTH_CHECK_INTERVAL))
    # A sweep that waited a few intervals is superseded by the next one, which
    # sees everything it would have: expiring keeps a stopped worker from
    # coming back to a pile of them. Not below 5 s: `expires` is an absolute
    # time from beat's clock, and a worker clock a second ahead must not
    # discard every sweep.
    options = {"expires": max(5.0, every * 0.9), "queue": QUEUE_SCHEDULE}
    return {
        "refresh.sweep_due_gateways": {
            "task": "refresh.sweep_due_gateways",
            "schedule": float(every),
            "options": dict(options),
        },
        "refresh.sweep_health_checks": {
            "task": "refresh.sweep_health_checks",
            "schedule": float(health_every),
            "options": dict(options),
        },
    }


# Lazy: Django settings are read when Celery's configuration is first needed,
# not while `project.settings` itself may still be importing.
app.add_defaults(lambda: {"beat_schedule": beat_schedule()})
app.autodiscover_tasks()


@signals.worker_init.connect
def _worker_started(**_: Any) -> None:
    """Fold metrics of processes that died before this worker started; start the exporter."""
    from django.conf import settings

    from refresh import metrics

    metrics.compact_dead_processes()
    if settings.TOOLSYNC_WORKER_METRICS_PORT:
        metrics.start_exporter(
            settings.TOOLSYNC_WORKER_METRICS_PORT,
            addr=settings.TOOLSYNC_WORKER_METRICS_ADDR,
        )


@signals.worker_process_init.connect
def _child_started(**_: Any) -> None:
    """A new pool child folds the files its dead predecessors left behind."""
    from refresh import metrics

    metrics.compact_dead_processes()


class _QuietSweeps(logging.Filter):
    """Drop Celery's per-task INFO lines for the sweeps (two a second, every second).

    A sweep that did something logs its own summary (`toolsync.schedule`).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        return "refresh.sweep_" not in record.getMessage()


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _quiet_sweeps(logger: logging.Logger, **_: Any) -> None:
    for name in ("celery.app.trace", "celery.worker.strategy", "celery.beat"):
        logging.getLogger(name).addFilter(_QuietSweeps())
