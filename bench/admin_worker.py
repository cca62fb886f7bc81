"""The admin benchmark, in its own process on a fresh database.

`python -m bench.admin_worker GATEWAYS TOOLS` prints one JSON object:

- the gateway list (100 rows a page) over GATEWAYS gateways, each with five
  tools and two finished runs: time and queries per page;
- the preview page and the run page of a first import of TOOLS tools (every
  item `added`) and of a TOOLS-tool catalog where one tool in ten changed,
  rendered through the real views: time, queries and page size.

Requests go through Django's test client (the whole view, templates and
middleware; no network). Medians of five requests after one warm-up.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import time
from typing import Any

from bench.__main__ import _setup_django

RUNS = 5


def timed(client: Any, url: str) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(RUNS):
        with CaptureQueriesContext(connection) as ctx:
            started = time.perf_counter()
            response = client.get(url)
            times.append(time.perf_counter() - started)
        assert response.status_code == 200
    return {
        "ms": statistics.median(times) * 1000,
        "queries": len(ctx.captured_queries),
        "kb": len(response.content) / 1024,
    }


def build_gateways(n: int) -> None:
    from django.db import transaction
    from django.utils import timezone

    from gateways.models import Gateway
    from gateways.services import tenant_get_or_create
    from refresh.models import RefreshRun
    from tools.models import Tool

    tenant = tenant_get_or_create(slug="bench-admin")
    now = timezone.now()
    with transaction.atomic():
        gateways = Gateway.objects.bulk_create(
            (
                Gateway(
                    tenant=tenant,
                    name=f"Gateway {i}",
                    prefix=f"g{i:05d}",
                    url="http://127.0.0.1:9/mcp",
                    health="healthy",
                    last_refresh_at=now,
                    next_refresh_at=now,
                )
                for i in range(n)
            ),
            batch_size=2000,
        )
        Tool.objects.bulk_create(
            (
                Tool(
                    gateway=g,
                    name=f"tool_{j}",
                    input_schema={"type": "object"},
                    spec_hash="0" * 64,
                    active=j < 4,
                    deactivated_at=None if j < 4 else now,
                )
                for g in gateways
                for j in range(5)
            ),
            batch_size=5000,
        )
        RefreshRun.objects.bulk_create(
            (
                RefreshRun(
                    gateway=g,
                    trigger=trigger,
                    status="succeeded",
                    applied=True,
                    complete=True,
                    summary={"added": 4, "updated": 1},
                    finished_at=now,
                )
                for g in gateways
                for trigger in ("schedule", "event")
            ),
            batch_size=5000,
        )


def report_of(n_tools: int, changed_every: int | None) -> dict[str, Any]:
    """A report as the engine writes it: a first import, or 1 in N tools changed."""
    from refresh.diff import RowSnapshot, diff_catalog
    from refresh.normalize import NormalizeLimits, normalize_tools
    from refresh.report import ReportContext, build_report
    from testservers.generators import generate_tools

    raw = generate_tools(n_tools, seed=3)
    rows: list[RowSnapshot] = []
    offered = raw
    if changed_every:
        before = normalize_tools(raw, NormalizeLimits())
        rows = [
            RowSnapshot(
                key=e.key,
                spec=e.spec,
                spec_hash=e.spec_hash,
                active=True,
                effect="write",
                review_state="approved",
                revision=1,
                row_id=i,
            )
            for i, e in enumerate(before.entries)
        ]
        offered = copy.deepcopy(raw)
        for tool in offered[::changed_every]:
            tool["description"] += " Now also returns archived records."
            tool["inputSchema"].setdefault("properties", {})["archived"] = {
                "type": "boolean"
            }
    after = normalize_tools(offered, NormalizeLimits())
    diff = diff_catalog(rows, after.entries, after.skipped, complete=True)
    return build_report(
        diff,
        ReportContext(
            run_id=None,
            gateway_id=0,
            prefix="big",
            source="http://127.0.0.1:9/mcp",
            trigger="admin",
            applied=False,
            apply_requested=False,
        ),
    )


def main() -> None:
    n_gateways, n_tools = int(sys.argv[1]), int(sys.argv[2])
    _setup_django()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from gateways.models import Gateway
    from refresh.models import RefreshRun

    build_gateways(n_gateways)
    user = get_user_model().objects.create_superuser("bench", "b@example.com", "x")
    client = Client(HTTP_HOST="localhost")  # one of the default ALLOWED_HOSTS
    client.force_login(user)
    out: dict[str, Any] = {"gateways": n_gateways, "tools": n_tools}
    out["gateway_list"] = timed(client, reverse("admin:gateways_gateway_changelist"))
    out["gateway_list_last_page"] = timed(
        client,
        reverse("admin:gateways_gateway_changelist") + f"?p={n_gateways // 100}",
    )

    gateway = Gateway.objects.order_by("pk").first()
    assert gateway is not None
    for label, every in (("first_import", None), ("one_in_ten_changed", 10)):
        report = report_of(n_tools, every)
        run = RefreshRun.objects.create(
            gateway=gateway,
            trigger="admin",
            status="succeeded",
            options={"apply": False},
            complete=True,
            summary=report["summary"],
            report=report,
            catalog_fingerprint="f" * 64,
        )
        out[f"{label}_preview"] = timed(
            client,
            reverse(
                "admin:gateways_gateway_refresh_preview", args=[gateway.pk, run.pk]
            ),
        )
        out[f"{label}_run_page"] = timed(
            client, reverse("admin:refresh_refreshrun_change", args=[run.pk])
        )
        out[f"{label}_summary"] = {
            k: v for k, v in report["summary"].items() if v and k != "unseen"
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
