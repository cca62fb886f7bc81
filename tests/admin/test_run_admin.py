"""The refresh-run admin: read-only history, filters, the stored report rendered like the preview."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tests import factories
from tests.admin.conftest import PAGE_STATUS, ROLES

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:refresh_refreshrun_changelist")


def run_ids(client: Client, query: str = "") -> set[int]:
    response = client.get(CHANGELIST + query)
    assert response.status_code == 200
    return {r.pk for r in response.context["cl"].result_list}


@pytest.fixture
def runs(tenant: Any) -> dict[str, RefreshRun]:
    """One run of each outcome, over two gateways and several triggers."""
    one = factories.GatewayFactory(tenant=tenant, prefix="one")
    two = factories.GatewayFactory(tenant=tenant, prefix="two")
    now = timezone.now()

    def make(gateway: Any, trigger: str, status: str, **fields: Any) -> RefreshRun:
        return factories.RefreshRunFactory(
            gateway=gateway, trigger=trigger, status=status, finished_at=now, **fields
        )

    return {
        "applied": make(one, "schedule", "succeeded", applied=True, complete=True,
                        options={"apply": True}),
        "dry_run": make(one, "admin", "succeeded", complete=True,
                        options={"apply": False}),
        "stale": make(one, "admin", "succeeded", complete=True,
                      options={"apply": True}),
        "incomplete": make(two, "api", "succeeded", complete=False,
                           options={"apply": False}),
        "failed": make(two, "event", "failed", reason="connection refused"),
        "skipped": make(two, "schedule", "skipped", reason="coalesced"),
        "queued": make(two, "recovery", "queued"),
    }  # fmt: skip


def test_filters_by_gateway_trigger_and_outcome(
    people: dict[str, Any], client: Client, runs: dict[str, RefreshRun]
) -> None:
    client.force_login(people["admin"])
    page = client.get(CHANGELIST)
    assert [f.title for f in page.context["cl"].filter_specs][:3] == [
        "outcome",
        "trigger",
        "status",
    ]
    one = runs["applied"].gateway
    ids = {k: r.pk for k, r in runs.items()}
    assert run_ids(client, f"?gateway__id__exact={one.pk}") == {
        ids["applied"],
        ids["dry_run"],
        ids["stale"],
    }
    assert run_ids(client, "?trigger__exact=schedule") == {
        ids["applied"],
        ids["skipped"],
    }
    expected = {
        "applied": {ids["applied"]},
        "dry_run": {ids["dry_run"], ids["incomplete"]},
        "stale_preview": {ids["stale"]},
        "incomplete": {ids["incomplete"]},
        "failed": {ids["failed"]},
        "skipped": {ids["skipped"]},
        "in_progress": {ids["queued"]},
    }
    for outcome, want in expected.items():
        assert run_ids(client, f"?outcome={outcome}") == want, outcome
    combined = (
        f"?gateway__id__exact={one.pk}&trigger__exact=admin&outcome=stale_preview"
    )
    assert run_ids(client, combined) == {ids["stale"]}


def test_outcome_badges_in_the_list(
    people: dict[str, Any], client: Client, runs: dict[str, RefreshRun]
) -> None:
    client.force_login(people["admin"])
    html = client.get(CHANGELIST).content.decode()
    for label in (
        "applied",
        "dry run",
        "not applied: server changed",
        "incomplete",
        "failed",
        "skipped",
        "queued",
    ):
        assert f">{label}</span>" in html, label


def test_list_queries_do_not_grow_with_runs(
    people: dict[str, Any], client: Client, runs: dict[str, RefreshRun], tenant: Any
) -> None:
    client.force_login(people["admin"])
    client.get(CHANGELIST)

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            client.get(CHANGELIST)
        return len(ctx.captured_queries)

    few = queries()
    gateway = runs["applied"].gateway
    for _ in range(40):
        factories.RefreshRunFactory(
            gateway=gateway, status="succeeded", requested_by=people["admin"]
        )
    assert queries() == few


@pytest.mark.parametrize("role", ROLES)
def test_run_page_by_role(
    role: str, people: dict[str, Any], client: Client, runs: dict[str, RefreshRun]
) -> None:
    client.force_login(people[role])
    url = reverse("admin:refresh_refreshrun_change", args=[runs["applied"].pk])
    assert client.get(url).status_code == PAGE_STATUS[role]


def test_runs_are_read_only(
    people: dict[str, Any], client: Client, runs: dict[str, RefreshRun]
) -> None:
    run = runs["failed"]
    client.force_login(people["superuser"])
    url = reverse("admin:refresh_refreshrun_change", args=[run.pk])
    page = client.get(url)
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    assert client.post(url, {"reason": "rewritten"}).status_code == 403
    assert client.get(reverse("admin:refresh_refreshrun_add")).status_code == 403
    delete = reverse("admin:refresh_refreshrun_delete", args=[run.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    run.refresh_from_db()
    assert run.reason == "connection refused"


def _report_html(html: str) -> str:
    start = html.index('<div class="ts-report" id="ts-report">')
    end = html.index("<!-- /ts-report -->", start)
    return re.sub(r"\s+", " ", html[start:end])


def test_run_page_renders_the_stored_report_the_way_the_preview_did(
    people: dict[str, Any], client: Client, served_gateway: Any
) -> None:
    gateway, server = served_gateway(tools=6)
    server.mutate(change=0.5, add=0.3, remove=0.3, seed=21)
    run = refresh_gateway(
        gateway=gateway, trigger=RefreshRun.Trigger.ADMIN, options=RefreshOptions()
    )
    client.force_login(people["admin"])

    preview = client.get(
        reverse("admin:gateways_gateway_refresh_preview", args=[gateway.pk, run.pk])
    )
    record = client.get(reverse("admin:refresh_refreshrun_change", args=[run.pk]))

    assert preview.status_code == record.status_code == 200
    shown = _report_html(preview.content.decode())
    assert _report_html(record.content.decode()) == shown
    for change in ("added", "updated", "disappeared", "unchanged"):
        assert f'data-group="{change}"' in shown
    # The record offers its preview again while it can still be applied.
    assert b'id="ts-open-preview"' in record.content


def test_a_failed_run_shows_why(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    gateway = factories.GatewayFactory(tenant=tenant, url="http://127.0.0.1:9/mcp")
    run = refresh_gateway(
        gateway=gateway, trigger=RefreshRun.Trigger.SCHEDULE, options=RefreshOptions()
    )
    assert run.status == "failed"
    client.force_login(people["admin"])
    page = client.get(reverse("admin:refresh_refreshrun_change", args=[run.pk]))
    html = page.content.decode()
    assert "Failed:" in html and run.reason in html
    assert b'id="ts-open-preview"' not in page.content


@pytest.mark.parametrize("role", ROLES)
def test_the_stored_report_as_json_by_role(
    role: str, people: dict[str, Any], client: Client, served_gateway: Any
) -> None:
    gateway, server = served_gateway(tools=3)
    server.mutate(change=0.5, add=0.5, remove=0.0, seed=22)
    run = refresh_gateway(
        gateway=gateway, trigger=RefreshRun.Trigger.ADMIN, options=RefreshOptions()
    )
    client.force_login(people[role])
    response = client.get(reverse("admin:refresh_refreshrun_report", args=[run.pk]))
    assert response.status_code == PAGE_STATUS[role]
    if response.status_code == 200:
        assert response["Content-Type"] == "application/json"
        assert response.json() == run.report
        page = client.get(reverse("admin:refresh_refreshrun_change", args=[run.pk]))
        assert b'id="ts-report-json"' in page.content
