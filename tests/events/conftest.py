"""End-to-end fixtures: `manage.py listen` as a real process beside real Celery workers.

Reuses the Celery test cluster of the scheduling tests (real worker, real
Redis broker, the test database); the listener is one more process of that
cluster, sharing its environment, and is stopped by its PID like the rest.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.schedule.conftest import (  # noqa: F401 - fixtures
    CeleryCluster,
    CeleryProcess,
    broker,
    celery_cluster,
    wait_for,
)

# Quick pacing for tests: reload twice a second, ping every 5 s, back off
# from 0.2 s to 2 s. The debounce stays at its 0.5 s default.
LISTENER_ENV = {
    "TOOLSYNC_LISTENER_RELOAD_SECONDS": "0.5",
    "TOOLSYNC_LISTENER_PING_SECONDS": "5",
    "TOOLSYNC_LISTENER_PING_TIMEOUT": "3",
    "TOOLSYNC_LISTENER_BACKOFF_INITIAL": "0.2",
    "TOOLSYNC_LISTENER_BACKOFF_MAX": "2",
}


@dataclass
class ListenerProcess:
    """A running `manage.py listen` and what it reports about itself."""

    process: CeleryProcess
    status_path: Path

    @property
    def pid(self) -> int:
        return self.process.proc.pid

    def status(self) -> dict[str, Any]:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {}

    def gateway(self, gateway_id: int) -> dict[str, Any]:
        return (self.status().get("gateways") or {}).get(str(gateway_id)) or {}

    def wait(
        self, predicate: Callable[[dict[str, Any]], object], what: str, timeout=60.0
    ) -> dict[str, Any]:
        def check() -> object:
            if self.process.proc.poll() is not None:
                pytest.fail(f"the listener exited:\n{self.process.log_tail()}")
            status = self.status()
            return status if status and predicate(status) else None

        return wait_for(check, timeout, f"{what}\n{self.process.log_tail()}")

    def wait_listening(self, gateway_ids: Iterable[int], timeout=60.0) -> None:
        ids = [str(g) for g in gateway_ids]
        self.wait(
            lambda s: all(
                (s.get("gateways") or {}).get(g, {}).get("state") == "listening"
                for g in ids
            ),
            f"gateways {ids} listening",
            timeout,
        )

    def children(self, needle: str) -> list[int]:
        """PIDs of the listener's child processes whose command line holds `needle`."""
        return child_pids(self.pid, needle)


@pytest.fixture
def start_listener(celery_cluster: CeleryCluster) -> Callable[..., ListenerProcess]:  # noqa: F811
    """Start `manage.py listen` (extra args and env allowed) on the cluster's database."""

    def start(*args: str, env: dict[str, str] | None = None) -> ListenerProcess:
        process = celery_cluster._start(  # noqa: SLF001 - the cluster's own spawner
            "listener",
            [sys.executable, "manage.py", "listen", *args],
            {**LISTENER_ENV, **(env or {})},
        )
        var = Path(celery_cluster.env["TOOLSYNC_VAR_DIR"])
        return ListenerProcess(process, var / "listener" / "shard-0-of-1.json")

    return start


def child_pids(parent: int, needle: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and needle.encode() in cmdline:
            found.append(int(entry.name))
    return found


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> Any:
    return wait_for(predicate, timeout, what, interval=0.05)


def elapsed_since(start: float) -> float:
    return time.monotonic() - start


def kill_quietly(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
