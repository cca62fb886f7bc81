"""Helper process for test_lease_sqlite: race lease_acquire from several processes.

Run as `python -m tests.refresh.sqlite_lease_race <var_dir> <processes> <rounds>`;
prints a JSON list of [start, end] intervals during which a process held the lease.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time


def _setup(var_dir: str) -> None:
    os.environ.pop("DATABASE_URL", None)  # the embedded default: SQLite
    os.environ["TOOLSYNC_VAR_DIR"] = var_dir
    os.environ.setdefault("SECRET_KEY", "race")
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()


def _worker(
    var_dir: str, gateway_id: int, rounds: int, out: multiprocessing.Queue
) -> None:
    _setup(var_dir)
    from refresh.lease import lease_acquire, lease_release
    from refresh.models import RefreshRun

    held = []
    for _ in range(rounds):
        run = RefreshRun.objects.create(gateway_id=gateway_id, trigger="schedule")
        lease = lease_acquire(gateway_id=gateway_id, run_id=run.pk)
        if lease.acquired:
            start = time.time()
            time.sleep(0.01)
            end = time.time()
            RefreshRun.objects.filter(pk=run.pk).update(status="succeeded")
            lease_release(gateway_id=gateway_id, token=lease.token)
            held.append([start, end])
    out.put(held)


def main() -> None:
    var_dir, processes, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    _setup(var_dir)
    from django.core.management import call_command

    from gateways.models import Gateway, Tenant

    call_command("migrate", verbosity=0)
    tenant = Tenant.objects.create(slug="race", name="race")
    gateway = Gateway.objects.create(
        tenant=tenant, name="g", prefix="g", url="http://127.0.0.1:9/mcp"
    )
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(var_dir, gateway.pk, rounds, out))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    intervals = [iv for _ in procs for iv in out.get(timeout=120)]
    for p in procs:
        p.join(30)
    print(json.dumps(intervals))


if __name__ == "__main__":
    main()
