"""One event-refresh benchmark scenario, in its own process; prints one JSON object.

`python -m bench.events_worker MODE ...` with DATABASE_URL pointing at an
empty, migrated benchmark database and CELERY_BROKER_URL at a Redis database
this benchmark may flush. Modes:

- `latency ERA TRIALS`: one gateway on an HTTP test server of ERA (legacy,
  modern); a real `manage.py listen` and a real Celery worker. Each trial
  adds one uniquely named tool to the server, sends one list_changed, and
  measures until the tool's row is committed (polled every 5 ms), i.e.
  notification -> debounce -> broker -> worker -> probe -> apply.
- `rest SESSIONS WINDOW`: SESSIONS gateways spread over ten HTTP test
  servers (half of each era), one listener with the production settings;
  once every session listens, the listener's RSS and CPU (user + system from
  /proc) over WINDOW seconds of rest. The window spans at least one liveness
  round trip per session (TOOLSYNC_LISTENER_PING_SECONDS, 30 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.__main__ import _setup_django

ROOT = Path(__file__).resolve().parent.parent
CELERY = str(Path(sys.executable).with_name("celery"))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


class Child:
    """A subprocess with its log, stopped by PID."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.log = Path(env["TOOLSYNC_VAR_DIR"]) / f"bench-{name}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._out = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT
        )

    def wait_log(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(self.log.read_text(errors="replace")[-3000:])
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._out.close()


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def _wait_listening(env: dict[str, str], count: int, timeout: float) -> float:
    path = Path(env["TOOLSYNC_VAR_DIR"]) / "listener" / "shard-0-of-1.json"
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            status = {}
        if (status.get("sessions") or {}).get("listening", 0) >= count:
            return time.monotonic() - started
        time.sleep(0.2)
    raise RuntimeError(f"{count} sessions not listening within {timeout:g} s")


def _percentile(values: list[float], q: float) -> float:
    from refresh.schedule import percentile

    return percentile(values, q)


def latency(era: str, trials: int) -> dict[str, Any]:
    from django.conf import settings

    from gateways.services import gateway_create, tenant_get_or_create
    from refresh.models import RefreshRun
    from refresh.options import RefreshOptions
    from refresh.services import refresh_gateway
    from testservers.harness import start_server
    from tools.models import Tool

    env = _env()
    server = start_server(tools=50, era=era)
    worker = listener = None
    try:
        gateway = gateway_create(
            tenant=tenant_get_or_create(slug="bench"),
            name=f"latency {era}",
            prefix=f"lat-{era}",
            url=server.url,
        )
        refresh_gateway(
            gateway=gateway, trigger="cli", options=RefreshOptions(apply=True)
        )
        worker = Child(
            f"worker-{era}",
            [
                CELERY, "-A", "project", "worker", "-l", "info", "-Q", "refresh",
                "-c", "2", "-n", f"bench-{era}@%h", "--without-mingle",
                "--without-gossip",
            ],
            env,
        )  # fmt: skip
        listener = Child(
            f"listener-{era}", [sys.executable, "manage.py", "listen"], env
        )
        worker.wait_log("ready.")
        _wait_listening(env, 1, 60)
        time.sleep(1.0)
        latencies: list[float] = []
        to_queued: list[float] = []
        run_seconds: list[float] = []
        for trial in range(trials):
            name = f"bench_{era}_{trial:04d}"
            server.add_tools(
                [
                    {
                        "name": name,
                        "description": f"Added by trial {trial}.",
                        "inputSchema": {"type": "object"},
                    }
                ]
            )
            sent_wall, sent = time.time(), time.monotonic()
            server.notify()
            deadline = sent + 30
            while not Tool.objects.filter(gateway=gateway, name=name).exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"trial {trial}: not applied within 30 s")
                time.sleep(0.005)
            latencies.append(time.monotonic() - sent)
            run = (
                RefreshRun.objects.filter(gateway=gateway, trigger="event")
                .order_by("-pk")
                .first()
            )
            if run is not None and run.started_at and run.finished_at:
                to_queued.append(run.queued_at.timestamp() - sent_wall)
                run_seconds.append((run.finished_at - run.started_at).total_seconds())
            # Let the run end and the quiet window pass before the next trial.
            while RefreshRun.objects.filter(
                gateway=gateway, status__in=["queued", "running"]
            ).exists():
                time.sleep(0.01)
            time.sleep(0.2)
        statuses = sorted(
            set(
                RefreshRun.objects.filter(gateway=gateway, trigger="event").values_list(
                    "status", flat=True
                )
            )
        )
        return {
            "era": era,
            "trials": trials,
            "debounce": settings.TOOLSYNC_DEBOUNCE_SECONDS,
            "p50": _percentile(latencies, 50),
            "p95": _percentile(latencies, 95),
            "max": max(latencies),
            "min": min(latencies),
            "to_queued_p50": _percentile(to_queued, 50),
            "run_p50": _percentile(run_seconds, 50),
            "event_runs": RefreshRun.objects.filter(
                gateway=gateway, trigger="event"
            ).count(),
            "statuses": statuses,
        }
    finally:
        for child in (listener, worker):
            if child is not None:
                child.stop()
        server.kill()


def rest(sessions: int, window: float) -> dict[str, Any]:
    from django.conf import settings

    from gateways.models import Gateway
    from gateways.services import gateway_create, tenant_get_or_create
    from testservers.harness import start_server

    env = _env()
    servers = [
        start_server(tools=10, era="legacy" if i % 2 == 0 else "modern")
        for i in range(10)
    ]
    listener = None
    try:
        tenant = tenant_get_or_create(slug="bench-rest")
        for i in range(sessions):
            gateway_create(
                tenant=tenant,
                name=f"rest {i}",
                prefix=f"rest-{i:04d}",
                url=servers[i % len(servers)].url,
            )
        listener = Child("listener-rest", [sys.executable, "manage.py", "listen"], env)
        connect_seconds = _wait_listening(env, sessions, 300)
        time.sleep(5.0)  # let the connect burst settle
        pid = listener.proc.pid
        cpu_before, wall_before = _cpu_seconds(pid), time.monotonic()
        rss_samples = []
        while time.monotonic() - wall_before < window:
            time.sleep(1.0)
            rss_samples.append(_status_kb(pid, "VmRSS"))
        cpu = _cpu_seconds(pid) - cpu_before
        wall = time.monotonic() - wall_before
        status = json.loads(
            (
                Path(env["TOOLSYNC_VAR_DIR"]) / "listener" / "shard-0-of-1.json"
            ).read_text()
        )
        return {
            "sessions": sessions,
            "listening": status["sessions"]["listening"],
            "eras": sorted(
                {g["era"] for g in status["gateways"].values() if g.get("era")}
            ),
            "gateways_in_db": Gateway.objects.count(),
            "connect_seconds": connect_seconds,
            "window": wall,
            "cpu_seconds": cpu,
            "cpu_percent": 100 * cpu / wall,
            "rss_mb": max(rss_samples) / 1024,
            "hwm_mb": _status_kb(pid, "VmHWM") / 1024,
            "threads": int(
                next(
                    line.split()[1]
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("Threads:")
                )
            ),
            "ping_seconds": settings.TOOLSYNC_LISTENER_PING_SECONDS,
            "reload_seconds": settings.TOOLSYNC_LISTENER_RELOAD_SECONDS,
        }
    finally:
        if listener is not None:
            listener.stop()
        for server in servers:
            server.kill()


def main() -> None:
    _setup_django()
    mode = sys.argv[1]
    if mode == "latency":
        result = latency(sys.argv[2], int(sys.argv[3]))
    elif mode == "rest":
        result = rest(int(sys.argv[2]), float(sys.argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
