"""One engine benchmark size, in its own process (so peak RSS is its own).

`python -m bench.engine_worker N` prints one JSON object with the figures.
Expects DATABASE_URL to point at the (empty, migrated) benchmark database.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time

from bench.__main__ import _setup_django


def main() -> None:
    n = int(sys.argv[1])
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else (5 if n <= 1000 else 3)
    _setup_django()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from gateways.services import (
        gateway_create,
        gateway_probe_target,
        probe_limits,
        tenant_get_or_create,
    )
    from refresh.collector import collector_paused
    from refresh.models import RefreshRun
    from refresh.options import RefreshOptions
    from refresh.probe import probe_gateway
    from refresh.services import probe_catalog, refresh_gateway
    from testservers.harness import start_server

    server = start_server(tools=n, page_size=100, seed=n)
    try:
        tenant = tenant_get_or_create(slug=f"bench-{n}")
        gateway = gateway_create(
            tenant=tenant, name=f"bench {n}", prefix=f"b{n}", url=server.url
        )
        target = gateway_probe_target(gateway)

        def probe_only() -> float:
            # Under the same collector pause as a refresh's own probe, so the
            # ratios compare the engine's work, not garbage-collector luck.
            start = time.perf_counter()
            with collector_paused():
                probe_catalog(probe_gateway(target, probe_limits()))
            return time.perf_counter() - start

        def refresh(options: RefreshOptions, on=None) -> tuple[float, dict]:
            on = on or gateway
            start = time.perf_counter()
            run = refresh_gateway(
                gateway=on, trigger=RefreshRun.Trigger.CLI, options=options
            )
            elapsed = time.perf_counter() - start
            assert run.status == "succeeded", run.reason
            # Only the summary: a run carries its whole report (megabytes at
            # 10,000 tools), and keeping six of them here inflated the peak
            # RSS by ~100 MB that no worker ever holds.
            return elapsed, run.summary

        def counted(options: RefreshOptions, on=None) -> int:
            with CaptureQueriesContext(connection) as queries:
                refresh(options, on)
            return len(queries.captured_queries)

        # Phase 1, timings and peak RSS, with no query capture (it keeps
        # every SQL text, megabytes of report JSON, and would skew RSS).
        probe_only()  # warm the server and the client
        first_s, _ = refresh(RefreshOptions(apply=True))
        # Paired rounds: each refresh right after a probe-only read of the
        # same catalog, so both see the same machine load and server state
        # (unpaired medians of 3 swung the ratio from 0.9x to 1.3x run to run).
        probe_times, noop = [], []
        for _ in range(repeats):
            probe_times.append(probe_only())
            noop.append(refresh(RefreshOptions(apply=True)))
        change_probe_times, changes = [], []
        for round_no in range(repeats):
            server.mutate(change=0.10, add=0.05, remove=0.05, seed=round_no + 1)
            change_probe_times.append(probe_only())
            changes.append(refresh(RefreshOptions(apply=True, deactivate_missing=True)))
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        # Phase 2, query counts (COPY statements included, see tools.bulk).
        other = gateway_create(
            tenant=tenant, name=f"count {n}", prefix=f"c{n}", url=server.url
        )
        first_q = counted(RefreshOptions(apply=True), other)
        noop_q = counted(RefreshOptions(apply=True))
        server.mutate(change=0.10, add=0.05, remove=0.05, seed=99)
        change_q = counted(RefreshOptions(apply=True, deactivate_missing=True))
        summary = changes[-1][1]
        result = {
            "n": n,
            "probe_only_s": statistics.median(probe_times),
            "first_apply_s": first_s,
            "first_apply_queries": first_q,
            "noop_s": statistics.median(t for t, _ in noop),
            "noop_queries": noop_q,
            "change_s": statistics.median(t for t, _ in changes),
            "change_probe_only_s": statistics.median(change_probe_times),
            "change_queries": change_q,
            "change_summary": {
                k: summary.get(k)
                for k in ("added", "updated", "disappeared", "deactivated")
            },
            "peak_rss_mb": peak_rss_mb,
        }
    finally:
        server.kill()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
