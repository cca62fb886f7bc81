"""The admin (issue 6): the gateway list at 10,000 gateways, previews of 10,000 tools.

Each size runs in `bench.admin_worker`, its own process on a fresh PostgreSQL
database.
"""

from __future__ import annotations

import os

from bench.dbutil import fresh_database, run_worker


def _cell(figures: dict[str, float]) -> str:
    return f"{figures['ms']:.0f} ms, {figures['queries']} q, {figures['kb']:.0f} KB"


def run(ctx) -> str:  # type: ignore[no-untyped-def]
    sizes = [(1_000, 1_000)] if ctx.quick else [(1_000, 1_000), (10_000, 10_000)]
    rows = []
    for n_gateways, n_tools in sizes:
        env = {**os.environ, "DATABASE_URL": fresh_database("toolsync_bench_admin")}
        rows.append(
            run_worker(
                "bench.admin_worker",
                n_gateways,
                n_tools,
                env=env,
                what=f"admin benchmark {n_gateways}/{n_tools}",
            )
        )
    lines = [
        "## Admin pages (issue 6)",
        "",
        "PostgreSQL, Django's test client (whole view, middleware and templates; no "
        "network), superuser. Gateway list: 100 rows a page; each gateway has five "
        "tools (four active) and two finished runs; health, last run, active-tool "
        "count and next refresh come from one query with correlated subqueries. "
        "Previews: a first import (every tool `added`) and a catalog where one tool "
        "in ten changed its description and schema; the page shows 200 items per "
        "change kind with their diffs and lists the rest by name. Medians of 5.",
        "",
        "| gateways | list, first page | list, last page "
        "| tools | first-import preview | its run page "
        "| 1-in-10-changed preview | its run page |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['gateways']:,} | {_cell(r['gateway_list'])} "
            f"| {_cell(r['gateway_list_last_page'])} | {r['tools']:,} "
            f"| {_cell(r['first_import_preview'])} "
            f"| {_cell(r['first_import_run_page'])} "
            f"| {_cell(r['one_in_ten_changed_preview'])} "
            f"| {_cell(r['one_in_ten_changed_run_page'])} |"
        )
    return "\n".join(lines) + "\n"
