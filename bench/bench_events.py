"""Event-driven refresh (issue 5): notification -> applied latency, and a listener at rest.

Each scenario runs in its own process (`bench.events_worker`) on a fresh
PostgreSQL database with Redis database 12 as the broker (BENCH_BROKER_URL
overrides; the benchmark flushes it):

- latency: a real `manage.py listen` and a real Celery worker (prefork, 2
  children); per trial one new tool on the server, one list_changed, and the
  time until the tool's row is committed. Target: p95 <= debounce + 1 s.
- rest: one listener process holding N sessions (half handshake era, half
  2026) with the production settings (ping every 30 s, reload every 2 s);
  RSS and CPU over a window of rest. Targets: <= 300 MB, <= 2 % of a core.
"""

from __future__ import annotations

import os

from bench.dbutil import fresh_database, run_worker

BROKER = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/12")


def _scenario(ctx, *args: str) -> dict:
    import redis

    redis.Redis.from_url(BROKER).flushdb()
    env = {
        **os.environ,
        "DATABASE_URL": fresh_database("toolsync_bench_events"),
        "CELERY_BROKER_URL": BROKER,
        "TOOLSYNC_VAR_DIR": str(ctx.root / "var" / "bench-events"),
    }
    return run_worker(
        "bench.events_worker", *args, env=env, what=f"events benchmark {args}"
    )


def run(ctx) -> str:
    trials = 20 if ctx.quick else 100
    # Two ping intervals (60 s) in the full run: every session is due at least once.
    sessions, window = (50, 35.0) if ctx.quick else (200, 125.0)
    legacy = _scenario(ctx, "latency", "legacy", str(trials))
    modern = _scenario(ctx, "latency", "modern", str(trials))
    rest = _scenario(ctx, "rest", str(sessions), str(window))
    target = legacy["debounce"] + 1.0

    def row(r: dict) -> str:
        return (
            f"| {r['era']} | {r['trials']} | {r['p50']:.2f} s | {r['p95']:.2f} s "
            f"| {r['max']:.2f} s | {r['to_queued_p50']:.2f} s | {r['run_p50']:.2f} s "
            f"| {r['event_runs']} ({', '.join(r['statuses'])}) |"
        )

    worst_p95 = max(legacy["p95"], modern["p95"])
    lines = [
        "## Event-driven refresh (issue 5)",
        "",
        "Notification -> applied refresh, through a real `manage.py listen`, Redis "
        "and a real Celery worker (prefork, 2 children) on PostgreSQL; one HTTP "
        "test server of 50+ tools; per trial one new tool, one `list_changed`, "
        f"and the time until its row is committed. Debounce {legacy['debounce']:g} s "
        "(the default). *to queued*: notification -> the event run recorded by the "
        "worker (debounce + broker + task start); *run*: the refresh itself.",
        "",
        "| era | trials | p50 | p95 | max | to queued (p50) | run (p50) | event runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        row(legacy),
        row(modern),
        "",
        f"- p95 {worst_p95:.2f} s against a target of debounce + 1 s = {target:.1f} s: "
        + ("meets" if worst_p95 <= target else "MISSES"),
        "",
        f"One listener process holding {rest['listening']} of {rest['sessions']} "
        f"sessions (10 HTTP servers, eras {', '.join(rest['eras'])}), production "
        f"settings (ping every {rest['ping_seconds']:g} s, reload every "
        f"{rest['reload_seconds']:g} s); all listening {rest['connect_seconds']:.1f} s "
        f"after start; measured over {rest['window']:.0f} s of rest:",
        "",
        "| sessions | RSS (max) | peak RSS | CPU | threads |",
        "|---:|---:|---:|---:|---:|",
        f"| {rest['listening']} | {rest['rss_mb']:.0f} MB | {rest['hwm_mb']:.0f} MB "
        f"| {rest['cpu_percent']:.2f} % of a core ({rest['cpu_seconds']:.2f} s) "
        f"| {rest['threads']} |",
        "",
        f"- RSS {rest['rss_mb']:.0f} MB (target <= 300 MB), CPU "
        f"{rest['cpu_percent']:.2f} % (target <= 2 %): "
        + (
            "meets"
            if rest["rss_mb"] <= 300 and rest["cpu_percent"] <= 2.0
            else "MISSES"
        ),
    ]
    return "\n".join(lines) + "\n"
