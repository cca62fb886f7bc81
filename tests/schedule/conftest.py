"""Real Celery workers and beat against the test database and a real Redis broker.

The broker is TOOLSYNC_TEST_BROKER_URL (CI: Redis database 15; set it to your
own database locally). Without it these tests skip, or fail when
TOOLSYNC_REQUIRE_POSTGRES is set (CI insists on real parts). Each test gets a
flushed broker database; every process started here is stopped by its PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))


def broker_url() -> str | None:
    return os.environ.get("TOOLSYNC_TEST_BROKER_URL") or None


@pytest.fixture
def broker() -> str:
    url = broker_url()
    if not url:
        if settings.TOOLSYNC_REQUIRE_POSTGRES:
            pytest.fail("TOOLSYNC_TEST_BROKER_URL is not set (CI needs a real broker)")
        pytest.skip("needs a real broker: set TOOLSYNC_TEST_BROKER_URL")
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError:
        if settings.TOOLSYNC_REQUIRE_POSTGRES:
            raise
        pytest.skip(f"broker {url} is not reachable")
    client.flushdb()  # the test broker database only
    return url


def test_database_url() -> str:
    """DATABASE_URL of the database this test session really uses."""
    db = connection.settings_dict
    user = quote(db.get("USER") or "")
    password = quote(db.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{db['NAME']}"


@dataclass
class CeleryProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, size: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-size:]


@dataclass
class CeleryCluster:
    """Starts workers and beat as subprocesses sharing one environment."""

    env: dict[str, str]
    workdir: Path
    processes: list[CeleryProcess] = field(default_factory=list)

    def worker(
        self,
        name: str = "w1",
        *,
        queues: str = "refresh,health,schedule",
        concurrency: int = 2,
        env: dict[str, str] | None = None,
        wait: bool = True,
    ) -> CeleryProcess:
        argv = [
            CELERY, "-A", "project", "worker", "-l", "info",
            "-Q", queues, "--concurrency", str(concurrency),
            "-n", f"{name}@%h", "--without-mingle", "--without-gossip",
        ]  # fmt: skip
        process = self._start(name, argv, env)
        if wait:
            self._wait_for_log(process, "ready.")
        return process

    def beat(self) -> CeleryProcess:
        argv = [
            CELERY, "-A", "project", "beat", "-l", "info",
            "-S", "django_celery_beat.schedulers:DatabaseScheduler",
            "--pidfile", str(self.workdir / "beat.pid"),
        ]  # fmt: skip
        return self._start("beat", argv, None)

    def _start(
        self, name: str, argv: list[str], env: dict[str, str] | None
    ) -> CeleryProcess:
        log = self.workdir / f"{name}.log"
        out = open(log, "ab")  # noqa: SIM115 - the child holds it
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**self.env, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        process = CeleryProcess(name, proc, log)
        self.processes.append(process)
        return process

    def _wait_for_log(
        self, process: CeleryProcess, text: str, timeout: float = 60.0
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.proc.poll() is not None:
                raise RuntimeError(
                    f"{process.name} exited ({process.proc.returncode}):\n"
                    + process.log_tail()
                )
            if text in process.log.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise RuntimeError(
            f"{process.name} not ready in {timeout:g} s:\n{process.log_tail()}"
        )

    def stop(self, process: CeleryProcess, timeout: float = 15.0) -> None:
        """Warm shutdown by PID (SIGTERM); SIGKILL the process and its children if it lingers."""
        if process.proc.poll() is not None:
            return
        children = _children(process.proc.pid)
        os.kill(process.proc.pid, signal.SIGTERM)
        try:
            process.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in [process.proc.pid, *children]:
                _kill(pid)
            process.proc.wait(timeout=10)
        for pid in children:
            _wait_gone(pid)

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            self.stop(process)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    _kill(pid)


@pytest.fixture
def celery_cluster(
    broker: str, transactional_db: Any, tmp_path: Path
) -> Iterator[CeleryCluster]:
    """Workers and beat on the test database (rows must be committed: transactional tests)."""
    if connection.vendor != "postgresql":
        pytest.skip("worker subprocesses need the PostgreSQL test database")
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "CELERY_BROKER_URL": broker,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "TOOLSYNC_VAR_DIR": str(tmp_path / "var"),
        "PYTHONUNBUFFERED": "1",
        # Short everything: tests measure behaviour, not production pacing.
        "TOOLSYNC_SCHEDULE_SWEEP_SECONDS": "1",
        "TOOLSYNC_HEALTH_CHECK_INTERVAL": "3600",
        "TOOLSYNC_DEFAULT_REFRESH_INTERVAL": "3600",
        "TOOLSYNC_HEALTH_CHECK_TIMEOUT": "3",
        "TOOLSYNC_PROBE_REQUEST_TIMEOUT": "10",
        "TOOLSYNC_PROBE_DEADLINE": "30",
        "TOOLSYNC_LEASE_SECONDS": "60",
    }
    cluster = CeleryCluster(env=env, workdir=tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def wait_for(
    predicate: Callable[[], Any], timeout: float, message: str, interval: float = 0.1
) -> Any:
    """Poll until `predicate()` is truthy; fail with `message` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s: {message}")
        time.sleep(interval)
