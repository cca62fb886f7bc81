"""One scheduling benchmark scenario, in its own process; prints one JSON object.

`python -m bench.schedule_worker MODE N WINDOW` with DATABASE_URL pointing at
an empty, migrated benchmark database and CELERY_BROKER_URL at a Redis
database this benchmark may flush. Modes:

- `periodic` / `periodic-edits`: one django-celery-beat PeriodicTask per
  gateway (the rejected design), driven by a real `celery beat`
  (DatabaseScheduler); `-edits` also changes one gateway's interval every
  10 s, as an admin would (each edit makes beat reload every entry).
- `sweep`: the chosen design: real beat sending `refresh.sweep_due_gateways`
  every second to a real worker (`--pool solo`, only the `schedule` queue),
  which claims due gateways and enqueues their runs.
- `throughput`: refreshes per minute one worker sustains against unchanged
  100-tool servers.

Delay = when the enqueued message reached Redis (read by a consumer thread
here, BRPOP) minus when the gateway fell due. Beat CPU = user + system time
of the beat process from the start of the window to its exit (exit includes
beat's final sync of run bookkeeping to the database, which it otherwise
defers for up to three minutes), from wait4(2).
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.__main__ import _setup_django

ROOT = Path(__file__).resolve().parent.parent
CELERY = str(Path(sys.executable).with_name("celery"))
INTERVALS = (60, 120, 300, 600, 900)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Child:
    """A subprocess whose total CPU time is read with wait4 when it exits."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT
        )
        self.cpu_total: float | None = None

    def cpu_now(self) -> float:
        return _cpu_seconds(self.proc.pid)

    def stop(self, timeout: float = 30.0) -> float:
        """SIGTERM (beat syncs and exits), wait, and return total CPU seconds."""
        os.kill(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(self.proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(self.proc.pid, 0)
                break
            time.sleep(0.05)
        self._out.close()
        self.cpu_total = usage.ru_utime + usage.ru_stime
        return self.cpu_total


class Consumer(threading.Thread):
    """Pops every message published to the given Redis lists, with arrival times."""

    def __init__(self, url: str, keys: list[str]) -> None:
        super().__init__(daemon=True)
        import redis

        self.client = redis.Redis.from_url(url)
        self.keys = keys
        self.arrivals: list[tuple[float, str, list[Any]]] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            item = self.client.brpop(self.keys, timeout=0.2)
            if item is None:
                continue
            at = time.time()
            message = json.loads(item[1])
            body = json.loads(base64.b64decode(message["body"]))
            self.arrivals.append((at, message["headers"]["task"], body[0]))


def _settled(children: list[Child], timeout: float = 120.0) -> None:
    """Wait until start-up is over: each child's CPU use below 20 % for a second."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = [c.cpu_now() for c in children]
        time.sleep(1.0)
        for child in children:
            if child.proc.poll() is not None:
                raise RuntimeError(f"exited: {child.log.read_text()[-2000:]}")
        if all(c.cpu_now() - b < 0.2 for c, b in zip(children, before, strict=True)):
            return
    raise RuntimeError("processes did not settle after start-up")


def _env(extra: dict[str, str]) -> dict[str, str]:
    # Persistent connections, as the Procfile runs beat and workers: the
    # DatabaseScheduler checks for schedule changes on every tick, and a new
    # PostgreSQL connection per tick would dominate its CPU.
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "DEBUG": "0",
        "DB_CONN_MAX_AGE": "300",
        **extra,
    }


def _percentile(values: list[float], q: float) -> float:
    from refresh.schedule import percentile

    return percentile(values, q)


def _delays(due: dict[int, float], arrivals: dict[int, float]) -> dict[str, Any]:
    delays = [arrivals[k] - due[k] for k in due if k in arrivals]
    missed = [k for k in due if k not in arrivals]
    return {
        "due": len(due),
        "enqueued": len(delays),
        "missed": len(missed),
        "p50": _percentile(delays, 50),
        "p95": _percentile(delays, 95),
        "max": max(delays) if delays else 0.0,
    }


def periodic(n: int, window: float, edits: bool, broker: str, tmp: Path) -> dict:
    from django.utils import timezone
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    schedules = {
        s: IntervalSchedule.objects.get_or_create(
            every=s, period=IntervalSchedule.SECONDS
        )[0]
        for s in INTERVALS
    }
    warmup = 45.0 if n >= 5000 else 20.0
    rng = random.Random(n)
    launch = time.time()
    t0 = launch + warmup
    due: dict[int, float] = {}
    rows = []
    for i in range(1, n + 1):
        every = rng.choice(INTERVALS)
        at = t0 + rng.uniform(0, every)  # uniform phase on its own grid
        if at < t0 + window:
            due[i] = at
        rows.append(
            PeriodicTask(
                name=f"refresh-gateway-{i}",
                task="refresh.request_refresh",
                args=json.dumps([i, "schedule"]),
                interval=schedules[every],
                queue="refresh",
                last_run_at=timezone.now()
                + timedelta(seconds=at - time.time() - every),
            )
        )
    PeriodicTask.objects.bulk_create(rows, batch_size=2000)
    from django_celery_beat.models import PeriodicTasks

    PeriodicTasks.update_changed()  # bulk writes bypass the change signal
    consumer = Consumer(broker, ["refresh"])
    consumer.start()
    beat = Child(
        [
            CELERY, "-A", "project", "beat", "-l", "warning",
            "--pidfile", str(tmp / "beat.pid"),
            "-S", "django_celery_beat.schedulers:DatabaseScheduler",
        ],
        _env({"TOOLSYNC_SCHEDULE_SWEEP_SECONDS": "3600"}),
        tmp / "beat.log",
    )  # fmt: skip
    _settled([beat])
    if time.time() > t0:
        raise RuntimeError("beat took longer than the warm-up to start; raise it")
    _sleep_until(t0)
    cpu_start, measured_from = beat.cpu_now(), time.time()
    edits_done = 0
    while time.time() < t0 + window:
        time.sleep(min(10.0, t0 + window - time.time()))
        if edits and time.time() < t0 + window:
            task = PeriodicTask.objects.get(name=f"refresh-gateway-{rng.randint(1, n)}")
            task.interval = schedules[rng.choice(INTERVALS)]
            task.save()  # the signal bumps PeriodicTasks: beat reloads all
            edits_done += 1
    time.sleep(3.0)  # let the last due ones arrive
    cpu_before_exit, measured_to = beat.cpu_now(), time.time()
    cpu_total = beat.stop()
    minutes = (measured_to - measured_from) / 60
    consumer.stop_flag.set()
    consumer.join()
    first: dict[int, float] = {}
    for at, _task, args in consumer.arrivals:
        first.setdefault(int(args[0]), at)
    return {
        "mode": "periodic-edits" if edits else "periodic",
        "n": n,
        "window_s": window,
        "edits": edits_done,
        "beat_cpu_s": cpu_total - cpu_start,
        "beat_exit_sync_cpu_s": cpu_total - cpu_before_exit,
        "beat_cpu_per_min": (cpu_total - cpu_start) / minutes,
        **_delays(due, first),
    }


def sweep(n: int, window: float, broker: str, tmp: Path) -> dict:
    from django.utils import timezone

    from gateways.models import Gateway
    from gateways.services import tenant_get_or_create
    from refresh.models import RefreshRun

    tenant = tenant_get_or_create(slug="bench-schedule")
    warmup = 30.0 if n >= 5000 else 20.0
    rng = random.Random(n)
    launch = time.time()
    t0 = launch + warmup
    due_at: dict[int, float] = {}
    rows = []
    far = timezone.now() + timedelta(days=1)
    for i in range(1, n + 1):
        every = rng.choice(INTERVALS)
        at = t0 + rng.uniform(0, every)
        rows.append(
            Gateway(
                tenant=tenant,
                name=f"g{i}",
                prefix=f"g{i}",
                url=f"http://127.0.0.1:9/{i}",
                refresh_interval=every,
                health=Gateway.Health.HEALTHY,
                next_refresh_at=timezone.now() + timedelta(seconds=at - time.time()),
                next_health_check_at=far,
            )
        )
        due_at[i] = at
    created = Gateway.objects.bulk_create(rows, batch_size=2000)
    due = {
        g.pk: due_at[i + 1]
        for i, g in enumerate(created)
        if due_at[i + 1] < t0 + window
    }
    consumer = Consumer(broker, ["refresh"])
    consumer.start()
    env = _env({"TOOLSYNC_SCHEDULE_SWEEP_SECONDS": "1"})
    worker = Child(
        [
            CELERY, "-A", "project", "worker", "-l", "warning", "--pool", "solo",
            "-Q", "schedule", "-n", "bench-sweep@%h",
            "--without-mingle", "--without-gossip", "--without-heartbeat",
        ],
        env,
        tmp / "worker.log",
    )  # fmt: skip
    beat = Child(
        [
            CELERY, "-A", "project", "beat", "-l", "warning",
            "--pidfile", str(tmp / "beat.pid"),
            "-S", "django_celery_beat.schedulers:DatabaseScheduler",
        ],
        env,
        tmp / "beat.log",
    )  # fmt: skip
    _settled([worker, beat])
    if time.time() > t0:
        raise RuntimeError("beat/worker took longer than the warm-up to start")
    _sleep_until(t0)
    beat_start, worker_start = beat.cpu_now(), worker.cpu_now()
    measured_from = time.time()
    _sleep_until(t0 + window + 3.0)
    minutes = (time.time() - measured_from) / 60
    beat_before_exit = beat.cpu_now()
    beat_total = beat.stop()
    worker_total = worker.stop()
    consumer.stop_flag.set()
    consumer.join()
    run_gateway = dict(RefreshRun.objects.values_list("pk", "gateway_id"))
    first: dict[int, float] = {}
    for at, task, args in consumer.arrivals:
        if task == "refresh.execute_run":
            first.setdefault(run_gateway[int(args[0])], at)
    return {
        "mode": "sweep",
        "n": n,
        "window_s": window,
        "beat_cpu_s": beat_total - beat_start,
        "beat_exit_sync_cpu_s": beat_total - beat_before_exit,
        "beat_cpu_per_min": (beat_before_exit - beat_start) / minutes,
        "sweep_worker_cpu_per_min": (worker_total - worker_start) / minutes,
        **_delays(due, first),
    }


def throughput(servers: int, runs: int, concurrency: int, tmp: Path) -> dict:
    from gateways.services import gateway_create, tenant_get_or_create
    from refresh.models import RefreshRun
    from refresh.options import RefreshOptions
    from refresh.schedule import enqueue_runs
    from refresh.services import refresh_gateway, refresh_run_create
    from testservers.harness import start_server

    started = [start_server(tools=100, page_size=100, seed=i) for i in range(servers)]
    worker = None
    try:
        tenant = tenant_get_or_create(slug="bench-throughput")
        gateways = []
        for i, server in enumerate(started):
            gateway = gateway_create(
                tenant=tenant, name=f"t{i}", prefix=f"t{i}", url=server.url
            )
            refresh_gateway(
                gateway=gateway, trigger="cli", options=RefreshOptions(apply=True)
            )
            gateways.append(gateway)
        worker = Child(
            [
                CELERY, "-A", "project", "worker", "-l", "warning",
                "--concurrency", str(concurrency), "-Q", "refresh",
                "-n", "bench-throughput@%h",
                "--without-mingle", "--without-gossip", "--without-heartbeat",
            ],
            _env({}),
            tmp / "throughput-worker.log",
        )  # fmt: skip
        # Warm-up: one run per gateway so the children have imported everything.
        _run_all(gateways, len(gateways), enqueue_runs, refresh_run_create)
        ids = _run_all(gateways, runs, enqueue_runs, refresh_run_create)
        done = RefreshRun.objects.filter(pk__in=ids)
        first = min(r.started_at for r in done)
        last = max(r.finished_at for r in done)
        statuses = sorted({r.status for r in done})
        seconds = (last - first).total_seconds()
        return {
            "mode": "throughput",
            "servers": servers,
            "runs": runs,
            "concurrency": concurrency,
            "seconds": seconds,
            "per_minute": runs / seconds * 60,
            "statuses": statuses,
            "applied_changes": sum(
                (r.summary or {}).get("added", 0) + (r.summary or {}).get("updated", 0)
                for r in done
            ),
        }
    finally:
        if worker is not None:
            worker.stop()
        for server in started:
            server.kill()


def _run_all(gateways: list, runs: int, enqueue_runs, refresh_run_create) -> list[int]:
    from refresh.models import RefreshRun
    from refresh.options import RefreshOptions

    ids = [
        refresh_run_create(
            gateway=gateways[i % len(gateways)],
            trigger="schedule",
            options=RefreshOptions(apply=True),
        ).pk
        for i in range(runs)
    ]
    enqueue_runs(ids)
    deadline = time.monotonic() + 600
    while RefreshRun.objects.filter(pk__in=ids, finished_at__isnull=True).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("throughput runs did not finish within 600 s")
        time.sleep(0.2)
    return ids


def _sleep_until(at: float) -> None:
    while (left := at - time.time()) > 0:
        time.sleep(min(left, 0.5))


def main() -> None:
    mode, n, window = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    _setup_django()
    broker = os.environ["CELERY_BROKER_URL"]
    import redis

    redis.Redis.from_url(broker).flushdb()  # this benchmark's own Redis database
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-schedule-{mode}-"))
    if mode in ("periodic", "periodic-edits"):
        result = periodic(n, window, mode == "periodic-edits", broker, tmp)
    elif mode == "sweep":
        result = sweep(n, window, broker, tmp)
    elif mode == "throughput":
        result = throughput(servers=n, runs=int(window), concurrency=2, tmp=tmp)
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
