"""Skills: refresh_all over 10,000 skills against a 50,000-tool tenant (issue 7).

Each size runs in its own process on a fresh PostgreSQL database.
"""

from __future__ import annotations

import os

from bench.dbutil import fresh_database, run_worker

TARGET_S = 2.0


def run(ctx) -> str:  # type: ignore[no-untyped-def]
    sizes = (
        [(200, 5_000), (1_000, 5_000)]
        if ctx.quick
        else [(1_000, 50_000), (10_000, 50_000)]
    )
    rows = []
    for n_skills, n_tools in sizes:
        env = {**os.environ, "DATABASE_URL": fresh_database("toolsync_bench_skills")}
        rows.append(
            run_worker(
                "bench.skills_worker",
                n_skills,
                n_tools,
                env=env,
                what=f"skills benchmark {n_skills}/{n_tools}",
            )
        )
    lines = [
        "## Skills (issue 7)",
        "",
        "PostgreSQL. One tenant, tools over 10 gateways (one last read incomplete); "
        "skills in six layers, each skill of layer k including two of layer k-1, so "
        "includes go five deep; ~2 % of references name tools that do not exist. "
        "`refresh_all` = lock, load, flatten, validate every reference, write the "
        "outcomes that changed. Medians of 3 runs.",
        "",
        "| skills | tools | refresh_all, all outcomes written | repeat, nothing changed "
        "| after 1 % of tools deactivated | queries (first / repeat / changed) "
        "| one gateway's skills step | referenced_by for 500 names | peak RSS |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['skills']:,} | {r['tools']:,} | {r['first_s'] * 1000:.0f} ms "
            f"| {r['repeat_s'] * 1000:.0f} ms | {r['changed_s'] * 1000:.0f} ms "
            f"| {r['first_queries']} / {r['repeat_queries']} / {r['changed_queries']} "
            f"| {r['hook_s'] * 1000:.0f} ms ({r['hook_queries']} q) "
            f"| {r['naming_s'] * 1000:.1f} ms ({r['naming_queries']} q) "
            f"| {r['peak_rss_mb']:.0f} MB |"
        )
    big = rows[-1]
    queries = {(r["first_queries"], r["repeat_queries"]) for r in rows}
    verdicts = [
        f"- refresh_all at {big['skills']:,} skills / {big['tools']:,} tools: "
        f"{big['first_s']:.2f} s (target <= {TARGET_S:.0f} s) "
        f"{'meets' if big['first_s'] <= TARGET_S else 'MISSES'}; outcome "
        f"{big['summary']}; after the deactivation {big['changed_summary']}",
        f"- query count across sizes (first / repeat): {sorted(queries)} "
        f"({'constant' if len(queries) == 1 else 'NOT constant'} in the number of "
        "skills)",
        f"- one gateway's skills step ({big['hook_summary']}): "
        f"{big['hook_s'] * 1000:.0f} ms, {big['hook_queries']} queries",
    ]
    return "\n".join(lines + [""] + verdicts) + "\n"
