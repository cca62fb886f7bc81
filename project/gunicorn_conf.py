"""gunicorn settings for `web` (Procfile): bind, workers, and Prometheus multiprocess hooks.

Every gunicorn worker writes its samples under PROMETHEUS_MULTIPROC_DIR (see
`refresh.metrics`); a worker that exits leaves files that the next worker to
start folds into the archive, so `/metrics` keeps every count.
"""

from __future__ import annotations

import os
from typing import Any

bind = f"{os.environ.get('BIND_ADDRESS', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "4"))
timeout = int(
    os.environ.get("WEB_TIMEOUT", "180")
)  # a manual refresh may take the probe deadline
accesslog = "-"


def child_exit(server: Any, worker: Any) -> None:
    """Drop the live gauges of a worker that exited (prometheus_client's own hook)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker: Any) -> None:
    """A new worker folds the sample files of workers that died before it."""
    from refresh.metrics import compact_dead_processes

    compact_dead_processes()
