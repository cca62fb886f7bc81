"""Prometheus metrics (SPEC 7), correct with any number of processes per machine.

Every process of a machine (web workers, Celery worker children, the listener)
writes its samples to memory-mapped files in `PROMETHEUS_MULTIPROC_DIR`
(prometheus_client's multiprocess mode; `project/celery.py` gives the variable
a default under `TOOLSYNC_VAR_DIR` before anything imports prometheus_client).
`/metrics` sums those files. Two gauges are read from the database at scrape
time instead, because the database, not any one process, knows them:
`toolsync_refreshes_in_progress` (leases held right now, by any process on any
machine) and `toolsync_gateway_up` (each enabled gateway's health).

Files of processes that died are folded into one archive file per metric
type (`compact_dead_processes`), so counters keep their totals and the
directory does not grow with every recycled worker child.

Names, labels and buckets are documented in docs/scheduling.md ("Metrics");
the listener's own (`toolsync_listener_*`) in docs/events.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Refresh durations span a no-op of a small server (tens of ms) to the probe
# deadline (120 s) and the lease (300 s).
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Due -> enqueued; the target is p95 <= 2 s, so resolve around it.
SCHEDULE_DELAY_BUCKETS = (0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60, 300)
NOTIFICATION_KINDS = frozenset({"tools", "prompts", "resources"})
# Summary keys that are not changes (`unchanged`) are not counted.
CHANGE_KEYS = (
    "added",
    "updated",
    "returning",
    "disappeared",
    "skipped",
    "deactivated",
    "reactivated",
)

REFRESH_DURATION = Histogram(
    "toolsync_refresh_duration_seconds",
    "Wall time of one refresh run, by trigger and outcome "
    "(applied, dry_run, incomplete, failed, skipped).",
    ["trigger", "outcome"],
    buckets=DURATION_BUCKETS,
)
REFRESH_CHANGES = Counter(
    "toolsync_refresh_changes_total",
    "Catalog changes written by applied refresh runs, by kind of change.",
    ["change"],
)
REFRESH_FAILURES = Counter(
    "toolsync_refresh_failures_total",
    "Refresh runs that failed, by reason (the run's error code).",
    ["reason"],
)
NOTIFICATIONS_RECEIVED = Counter(
    "toolsync_notifications_received_total",
    "list_changed notifications received from gateways, by kind.",
    ["kind"],
)
NOTIFICATIONS_COALESCED = Counter(
    "toolsync_notifications_coalesced_total",
    "Notifications folded into a refresh already pending, by kind.",
    ["kind"],
)
SCHEDULE_DELAY = Histogram(
    "toolsync_schedule_delay_seconds",
    "Delay between a gateway falling due and the sweep enqueueing its run.",
    buckets=SCHEDULE_DELAY_BUCKETS,
)
HEALTH_CHECKS = Counter(
    "toolsync_health_checks_total",
    "Liveness checks, by result (up, down).",
    ["result"],
)

# The notification listener (docs/events.md). Per-gateway series: the label
# value is the gateway id, so their number is bounded by the gateways.
LISTENER_REFRESH_REASONS = frozenset({"notification", "reconnect", "start"})
LISTENER_FAILURE_REASONS = frozenset(
    {
        "connect_failed",
        "timeout",
        "auth_failed",
        "protocol_error",
        "bad_target",
        "session_lost",
        "listen_unsupported",
    }
)
LISTENER_SESSION_STATES = ("connecting", "listening", "backoff", "unsupported")
LISTENER_NOTIFICATIONS = Counter(
    "toolsync_listener_notifications_received_total",
    "list_changed notifications received by the listener, by gateway and kind.",
    ["gateway", "kind"],
)
LISTENER_COALESCED = Counter(
    "toolsync_listener_notifications_coalesced_total",
    "Notifications folded into a refresh already pending, by gateway and kind.",
    ["gateway", "kind"],
)
LISTENER_REFRESHES = Counter(
    "toolsync_listener_refreshes_fired_total",
    "Event refreshes the listener enqueued, by gateway and reason "
    "(notification; reconnect: notifications may have been missed while down).",
    ["gateway", "reason"],
)
LISTENER_RECONNECTS = Counter(
    "toolsync_listener_reconnects_total",
    "Sessions re-established after one was lost, by gateway.",
    ["gateway"],
)
LISTENER_CONNECT_FAILURES = Counter(
    "toolsync_listener_session_failures_total",
    "Connection attempts that failed and sessions that died, by gateway and reason.",
    ["gateway", "reason"],
)
# Live gauges: summed over the listener processes that are alive (shards);
# a dead listener's values disappear instead of lingering.
LISTENER_SESSIONS = Gauge(
    "toolsync_listener_sessions",
    "Gateway sessions held by live listener processes, by state (connecting, "
    "listening, backoff, unsupported).",
    ["state"],
    multiprocess_mode="livesum",
)
LISTENER_HEARTBEAT = Gauge(
    "toolsync_listener_heartbeat_timestamp_seconds",
    "Unix time of each live listener shard's last reload of the gateways; "
    "absent or old means the listener is down or stuck.",
    ["shard"],
    multiprocess_mode="livemax",
)


def multiprocess_dir() -> str | None:
    """The shared sample directory, or None when multiprocess mode is off."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return path if path and os.path.isdir(path) else None


def _safe(fn: Any) -> Any:
    """Metrics must never fail the work they measure."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:  # noqa: BLE001
            logger.warning("recording metric %s failed", fn.__name__, exc_info=True)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@_safe
def run_finished(run: Any) -> None:
    """Record a finished (succeeded, failed or skipped) refresh run."""
    duration = _run_seconds(run)
    REFRESH_DURATION.labels(trigger=run.trigger, outcome=run.outcome).observe(duration)
    if run.status == "failed":
        REFRESH_FAILURES.labels(reason=run.error_code or "unknown").inc()
    if run.applied:
        summary = run.summary or {}
        for change in CHANGE_KEYS:
            count = summary.get(change) or 0
            if isinstance(count, int) and count > 0:
                REFRESH_CHANGES.labels(change=change).inc(count)


def _run_seconds(run: Any) -> float:
    if run.duration_ms is not None:
        return run.duration_ms / 1000
    started: datetime | None = getattr(run, "started_at", None)
    finished: datetime | None = getattr(run, "finished_at", None)
    if started and finished:
        return max(0.0, (finished - started).total_seconds())
    return 0.0


def _kind(kind: str) -> str:
    # Bounded label values: a hostile server must not mint new series.
    return kind if kind in NOTIFICATION_KINDS else "other"


@_safe
def notification_received(kind: str, gateway_id: int | None = None) -> None:
    """Count one list_changed notification (`kind`: tools, prompts, resources)."""
    NOTIFICATIONS_RECEIVED.labels(kind=_kind(kind)).inc()
    if gateway_id is not None:
        LISTENER_NOTIFICATIONS.labels(gateway=str(gateway_id), kind=_kind(kind)).inc()


@_safe
def notification_coalesced(kind: str, gateway_id: int | None = None) -> None:
    """Count one notification that joined a refresh already pending."""
    NOTIFICATIONS_COALESCED.labels(kind=_kind(kind)).inc()
    if gateway_id is not None:
        LISTENER_COALESCED.labels(gateway=str(gateway_id), kind=_kind(kind)).inc()


@_safe
def listener_refresh_fired(gateway_id: int, reason: str) -> None:
    """Count one event refresh the listener enqueued."""
    reason = reason if reason in LISTENER_REFRESH_REASONS else "other"
    LISTENER_REFRESHES.labels(gateway=str(gateway_id), reason=reason).inc()


@_safe
def listener_reconnected(gateway_id: int) -> None:
    """Count one session re-established after a loss."""
    LISTENER_RECONNECTS.labels(gateway=str(gateway_id)).inc()


@_safe
def listener_session_failed(gateway_id: int, reason: str) -> None:
    """Count one failed connection attempt or lost session."""
    reason = reason if reason in LISTENER_FAILURE_REASONS else "other"
    LISTENER_CONNECT_FAILURES.labels(gateway=str(gateway_id), reason=reason).inc()


@_safe
def listener_health(*, shard: str, sessions: dict[str, int], heartbeat: float) -> None:
    """Publish one listener process's session counts and heartbeat."""
    for state in LISTENER_SESSION_STATES:
        LISTENER_SESSIONS.labels(state=state).set(sessions.get(state, 0))
    LISTENER_HEARTBEAT.labels(shard=shard).set(heartbeat)


@_safe
def listener_stopped() -> None:
    """Drop this process's live gauges at a clean exit (a crash: on compaction)."""
    path = multiprocess_dir()
    if path is not None:
        mark_process_dead(os.getpid(), path)


@_safe
def schedule_delays(delays: Iterable[float]) -> None:
    """Record due -> enqueued delays of one sweep batch."""
    for delay in delays:
        SCHEDULE_DELAY.observe(max(0.0, delay))


@_safe
def health_checked(*, up: bool) -> None:
    """Count one liveness check."""
    HEALTH_CHECKS.labels(result="up" if up else "down").inc()


class DatabaseCollector(Collector):
    """Gauges the database knows better than any process: leases and health."""

    def collect(self) -> Iterator[Metric]:
        from django.db.models import Q
        from django.utils import timezone

        from gateways.models import Gateway

        now = timezone.now()
        in_progress = GaugeMetricFamily(
            "toolsync_refreshes_in_progress",
            "Refreshes holding a live lease right now (all processes, all machines).",
        )
        in_progress.add_metric(
            [],
            Gateway.objects.filter(
                Q(lease_token__isnull=False) & Q(lease_expires_at__gt=now)
            ).count(),
        )
        yield in_progress
        up = GaugeMetricFamily(
            "toolsync_gateway_up",
            "1 if the enabled gateway's last health checks found it healthy, else 0.",
            labels=["gateway"],
        )
        for pk, health in (
            Gateway.objects.filter(enabled=True)
            .order_by("pk")
            .values_list("pk", "health")
        ):
            up.add_metric([str(pk)], 1.0 if health == Gateway.Health.HEALTHY else 0.0)
        yield up


def render_latest() -> tuple[bytes, str]:
    """The text exposition of every metric, summed over this machine's processes."""
    path = multiprocess_dir()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    if path is None:
        # Multiprocess mode off: only this process's own samples exist.
        return generate_latest(REGISTRY) + generate_latest(registry), CONTENT_TYPE
    with _dir_lock(path, exclusive=False):
        MultiProcessCollector(registry, path=path)
        body = generate_latest(registry)
    return body, CONTENT_TYPE


_FILE = re.compile(
    r"^(?P<typ>counter|histogram|summary|gauge)_(?:(?P<mode>[a-z]+)_)?(?P<pid>\d+)\.db$"
)
_ARCHIVED_TYPES = ("counter", "histogram", "summary")
_compact_lock = threading.Lock()


@contextlib.contextmanager
def _dir_lock(path: str, *, exclusive: bool) -> Iterator[None]:
    """Scrapes share it; compaction takes it alone, so no scrape sees a half-move."""
    with open(os.path.join(path, ".lock"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def compact_dead_processes(path: str | None = None) -> list[int]:
    """Fold the sample files of dead processes into per-type archive files.

    Counters and histograms of a dead process keep counting in the archive
    (a counter that dropped would look like a reset to Prometheus); live
    gauges of dead processes are removed (`mark_process_dead`). Returns the
    pids that were compacted. Safe to call from several processes at once.
    """
    path = path or multiprocess_dir()
    if path is None:
        return []
    with _compact_lock, _dir_lock(path, exclusive=True):
        dead: dict[int, list[str]] = {}
        for name in os.listdir(path):
            match = _FILE.match(name)
            if match is None:
                continue
            pid = int(match["pid"])
            if pid != os.getpid() and not _alive(pid):
                dead.setdefault(pid, []).append(os.path.join(path, name))
        if not dead:
            return []
        for typ in _ARCHIVED_TYPES:
            files = [
                f
                for group in dead.values()
                for f in group
                if os.path.basename(f).startswith(f"{typ}_")
            ]
            if files:
                _archive(path, typ, files)
        for pid, group in dead.items():
            mark_process_dead(pid, path)
            for f in group:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(f)
        return sorted(dead)


def _archive(path: str, typ: str, files: list[str]) -> None:
    archive = os.path.join(path, f"{typ}_archive.db")
    sources = files + ([archive] if os.path.exists(archive) else [])
    merged = MultiProcessCollector.merge(sources, accumulate=False)
    tmp = os.path.join(path, f".{typ}_archive.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)
    out = MmapedDict(tmp)
    try:
        for metric in merged:
            for sample in metric.samples:
                key = _key(
                    metric.name, sample.name, sample.labels, metric.documentation
                )
                out.write_value(key, sample.value, 0.0)
    finally:
        out.close()
    # The rename is atomic; the lock keeps scrapes from seeing archive and
    # source files both counted between this and the removals.
    os.replace(tmp, archive)


def _key(metric_name: str, name: str, labels: dict[str, str], help_text: str) -> str:
    # The same key prometheus_client.mmap_dict.mmap_key writes.
    return json.dumps([metric_name, name, labels, help_text], sort_keys=True)


def ensure_multiprocess_dir(path: str | os.PathLike[str]) -> Path:
    """Create the sample directory (idempotent)."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def wipe_multiprocess_dir(path: str | None = None) -> None:
    """Remove the sample files of every process that is gone (`make run` start).

    Files of live processes, this one included, stay: prometheus_client
    keeps them memory-mapped, and writes to a deleted file would be lost.
    """
    path = path or multiprocess_dir()
    if path is None:
        return
    for name in os.listdir(path):
        match = _FILE.match(name)
        if match is not None and _alive(int(match["pid"])):
            continue
        if name.endswith(".db"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(path, name))


def start_exporter(port: int, addr: str = "127.0.0.1") -> None:
    """Serve this machine's summed metrics on `addr:port` (worker machines)."""
    from prometheus_client import start_http_server

    path = multiprocess_dir()
    registry = CollectorRegistry(auto_describe=False)
    if path is not None:
        MultiProcessCollector(registry, path=path)
    try:
        start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        # Another worker of this machine serves the same directory already.
        logger.warning("metrics exporter not started on %s:%s: %s", addr, port, exc)
