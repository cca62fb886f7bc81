"""Refresh engine: probe-only vs full, no-op and change refreshes (issue 2).

PostgreSQL, Streamable HTTP, pages of 100, N = 100 / 1,000 / 10,000 tools.
Each size runs in its own process so its peak RSS is its own.
"""

from __future__ import annotations

import os

from bench.dbutil import fresh_database, run_worker


def run(ctx) -> str:
    sizes = [100, 1000] if ctx.quick else [100, 1000, 10_000]
    env = {**os.environ, "DATABASE_URL": fresh_database("toolsync_bench_engine")}
    rows = []
    for n in sizes:
        rows.append(
            run_worker(
                "bench.engine_worker", n, env=env, what=f"engine benchmark N={n}"
            )
        )
    lines = [
        "## Refresh engine (issue 2)",
        "",
        "PostgreSQL, Streamable HTTP, pages of 100. Probe-only = connect + list every page + "
        "normalize/validate (no database). Times are medians of paired rounds (5 at "
        "N <= 1,000, 3 at 10,000): each refresh right after a probe-only read of the same "
        "catalog. The change refresh follows a server mutation of 10 % changed, 5 % added, "
        "5 % removed, applied with deactivate_missing, and is compared with the probe-only "
        "read of the mutated catalog.",
        "",
        "| N | probe-only | first apply | no-op refresh | no-op / probe | change refresh "
        "| change / probe | queries (first / no-op / change) | peak RSS |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for r in rows:
        noop_ratio = r["noop_s"] / r["probe_only_s"]
        change_ratio = r["change_s"] / r["change_probe_only_s"]
        lines.append(
            f"| {r['n']:,} | {r['probe_only_s'] * 1000:.0f} ms | {r['first_apply_s'] * 1000:.0f} ms "
            f"| {r['noop_s'] * 1000:.0f} ms | {noop_ratio:.2f}x | {r['change_s'] * 1000:.0f} ms "
            f"| {change_ratio:.2f}x | {r['first_apply_queries']} / {r['noop_queries']} / "
            f"{r['change_queries']} | {r['peak_rss_mb']:.0f} MB |"
        )
        verdicts.append(
            f"- N={r['n']:,}: no-op {noop_ratio:.2f}x (target <= 1.3x) "
            f"{'meets' if noop_ratio <= 1.3 else 'MISSES'}; change {change_ratio:.2f}x "
            f"(target <= 1.5x) {'meets' if change_ratio <= 1.5 else 'MISSES'}; "
            f"engine time beyond the probe: no-op "
            f"{(r['noop_s'] - r['probe_only_s']) * 1000:.0f} ms, change "
            f"{(r['change_s'] - r['change_probe_only_s']) * 1000:.0f} ms; "
            f"last change round {r['change_summary']}"
        )
    noop_queries = {r["noop_queries"] for r in rows}
    verdicts.append(
        f"- no-op query count across N: {sorted(noop_queries)} "
        f"({'constant' if len(noop_queries) == 1 else 'NOT constant'})"
    )
    big = rows[-1]
    verdicts.append(
        f"- peak RSS at N={big['n']:,}: {big['peak_rss_mb']:.0f} MB (target <= 300 MB) "
        f"{'meets' if big['peak_rss_mb'] <= 300 else 'MISSES'}"
    )
    why = [
        "",
        "Reading the ratios: the test server answers on loopback, so a probe is as "
        "cheap as it can ever be (a 100-tool probe takes ~15 ms), which makes every "
        "ratio a worst case. (1) Every run pays a fixed ~15 ms of bookkeeping "
        "whatever the size: recording the run, taking and releasing the lease in "
        "two short transactions (SPEC 4), reading the stored rows, the skills "
        "check, the report and the run's final UPDATE, 17 queries in all, constant "
        "in N; at 100 tools that alone is more than the probe. It is not moved out "
        "of the measured refresh (by skipping the lease or the run record), because "
        "it is what makes a refresh safe and auditable. (2) A change refresh "
        "writes: at 10 % changed / 5 % added / 5 % removed it writes 20 % of the "
        "rows and a revision for each created or updated tool (COPY, one "
        "UPDATE ... FROM jsonb_to_recordset, the gap-free revision trigger), all in "
        "one transaction; on loopback that costs about half of a probe. Against a "
        "real remote server each page is a network round trip (tens of ms), and the "
        "same engine work is a few percent of the refresh. The cyclic garbage "
        "collector is paused during a refresh (refresh/collector.py; it spent "
        "0.44 s re-scanning live objects in a 2.5 s 10,000-tool no-op), and the "
        "probe-only baseline is measured under the same pause.",
    ]
    return "\n".join(lines + [""] + verdicts + why) + "\n"
