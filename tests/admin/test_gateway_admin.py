"""The gateway list: its columns, a constant number of queries, and the refresh action."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from gateways.models import Gateway
from gateways.services import gateway_create
from project.celery import app
from refresh.models import RefreshRun
from refresh.tasks import execute_run_task
from tests import factories
from tests.admin.conftest import PAGE_STATUS, ROLES
from tests.schedule.conftest import wait_for

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:gateways_gateway_changelist")


def finished_run(gateway: Gateway, **fields: Any) -> RefreshRun:
    fields.setdefault("status", RefreshRun.Status.SUCCEEDED)
    fields.setdefault("finished_at", timezone.now())
    return factories.RefreshRunFactory(gateway=gateway, **fields)


def row_of(page: Any, gateway: Gateway) -> Any:
    return next(g for g in page.context["cl"].result_list if g.pk == gateway.pk)


def make_gateways(tenant: Any, count: int, start: int = 0) -> list[Gateway]:
    """Gateways with tools (one inactive) and a few runs each, as a busy list has."""
    made = []
    for n in range(start, start + count):
        gateway = factories.GatewayFactory(tenant=tenant, prefix=f"g{n}")
        for t in range(3):
            factories.ToolFactory(gateway=gateway, name=f"t{t}")
        factories.ToolFactory(
            gateway=gateway, name="old", active=False, deactivated_at=timezone.now()
        )
        finished_run(gateway, applied=True, summary={"added": 4})
        finished_run(gateway, status=RefreshRun.Status.FAILED, reason="down")
        Gateway.objects.filter(pk=gateway.pk).update(last_refresh_at=timezone.now())
        made.append(gateway)
    return made


def test_list_shows_health_last_refresh_tool_count_and_next_refresh(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    now = timezone.now()
    healthy = factories.GatewayFactory(
        tenant=tenant,
        prefix="fine",
        health="healthy",
        refresh_interval=120,
        last_refresh_at=now - timedelta(minutes=3),
        next_refresh_at=now + timedelta(seconds=90),
    )
    for name in ("a", "b"):
        factories.ToolFactory(gateway=healthy, name=name)
    factories.ToolFactory(
        gateway=healthy, name="gone", active=False, deactivated_at=now
    )
    older = finished_run(
        healthy,
        applied=True,
        summary={"added": 3},
        finished_at=now - timedelta(hours=1),
    )
    latest = finished_run(
        healthy,
        applied=True,
        complete=True,
        summary={"added": 1, "updated": 2, "disappeared": 1},
        options={"apply": True},
        finished_at=now - timedelta(minutes=3),
    )
    factories.RefreshRunFactory(gateway=healthy, status="queued")  # not finished
    down = factories.GatewayFactory(
        tenant=tenant,
        prefix="down",
        health="unreachable",
        health_reason="connection refused",
        last_refresh_at=now,
    )
    finished_run(down, status="failed", reason="connection refused")
    off = factories.GatewayFactory(tenant=tenant, prefix="off", enabled=False)
    client.force_login(people["admin"])

    page = client.get(CHANGELIST)
    html = page.content.decode()

    fine = row_of(page, healthy)
    assert fine.active_tools == 2
    assert fine.last_run.pk == latest.pk != older.pk
    admin = page.context["cl"].model_admin
    assert "Healthy" in admin.health_badge(fine) and "ts-ok" in admin.health_badge(fine)
    last = admin.last_refresh(fine)
    assert ">applied<" in last and "+1 ~2 −1" in last
    assert reverse("admin:refresh_refreshrun_change", args=[latest.pk]) in last
    assert "3\xa0minutes ago" in last
    nxt = admin.next_refresh(fine)
    assert nxt.startswith('<span title="') and "in 1\xa0minute" in nxt
    assert "(every 120 s)" in nxt
    tools_link = (
        reverse("admin:tools_tool_changelist") + f"?gateway__id__exact={healthy.pk}"
    )
    assert f'<a href="{tools_link}">2</a>' in html

    bad = row_of(page, down)
    assert "Unreachable" in admin.health_badge(bad)
    assert 'title="connection refused"' in admin.health_badge(bad)
    assert ">failed<" in admin.last_refresh(bad)
    assert "due now" in admin.next_refresh(bad)

    never = row_of(page, off)
    assert "never" in admin.last_refresh(never)
    assert "disabled" in admin.next_refresh(never)
    assert row_of(page, off).active_tools == 0


def test_list_costs_the_same_queries_for_3_or_30_gateways(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    make_gateways(tenant, 3)
    client.force_login(people["admin"])
    client.get(CHANGELIST)  # warm the session and content-type caches

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(CHANGELIST)
        assert response.status_code == 200
        return len(ctx.captured_queries)

    few = queries()
    make_gateways(tenant, 27, start=3)
    many = queries()
    assert len(client.get(CHANGELIST).context["cl"].result_list) == 30
    assert many == few
    assert few <= 12  # session, user, perms, counts, one page query, filters


@pytest.mark.parametrize("role", ROLES)
def test_list_and_change_page_by_role(
    role: str, people: dict[str, Any], client: Client, tenant: Any
) -> None:
    mine = factories.GatewayFactory(tenant=tenant, prefix="mine")
    theirs = factories.GatewayFactory(
        tenant=people["outsider"].memberships.get().tenant, prefix="theirs"
    )
    client.force_login(people[role])
    listing = client.get(CHANGELIST)
    assert listing.status_code == 200
    shown = {g.prefix for g in listing.context["cl"].result_list}
    expected = {
        "superuser": {"mine", "theirs"},
        "owner": {"mine"},
        "admin": {"mine"},
        "member": set(),
        "viewer": set(),
        "outsider": {"theirs"},
    }[role]
    assert shown == expected
    page = client.get(reverse("admin:gateways_gateway_change", args=[mine.pk]))
    assert page.status_code == PAGE_STATUS[role]
    if role in ("owner", "admin"):
        other = reverse("admin:gateways_gateway_change", args=[theirs.pk])
        assert client.get(other).status_code == 404
        assert client.post(other, {"name": "taken over"}).status_code == 404
        theirs.refresh_from_db()
        assert theirs.name != "taken over"


# -- the list action -------------------------------------------------------------------------


def test_refresh_selected_enqueues_after_commit_and_reports_how_many(
    people: dict[str, Any],
    client: Client,
    tenant: Any,
    mcp_server_factory: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    server = mcp_server_factory(tools=3)
    ready = [
        gateway_create(tenant=tenant, name=p, prefix=p, url=server.url)
        for p in ("one", "two")
    ]
    Gateway.objects.filter(pk=ready[1].pk).update(auto_apply=False)
    off = gateway_create(tenant=tenant, name="off", prefix="off", url=server.url)
    Gateway.objects.filter(pk=off.pk).update(enabled=False)
    caller = gateway_create(
        tenant=tenant, name="c", prefix="c", url=server.url, auth_type="as_caller"
    )
    theirs = factories.GatewayFactory(
        tenant=people["outsider"].memberships.get().tenant
    )
    enqueued: list[int] = []
    monkeypatch.setattr("refresh.hooks.enqueue_run", enqueued.append)
    client.force_login(people["admin"])

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        page = client.post(
            CHANGELIST,
            {
                "action": "refresh_selected",
                "_selected_action": [g.pk for g in (*ready, off, caller, theirs)],
            },
            follow=True,
        )
        assert enqueued == []  # nothing reaches the queue before the commit

    [message] = [str(m) for m in page.context["messages"]]
    assert message.startswith(
        "Queued 2 refreshes; 1 disabled gateway skipped; 1 skipped that need a "
        "probe credential"
    )
    for callback in callbacks:
        callback()
    runs = list(RefreshRun.objects.filter(pk__in=enqueued).order_by("gateway__prefix"))
    assert [r.gateway for r in runs] == sorted(ready, key=lambda g: g.prefix)
    assert all((r.trigger, r.status) == ("admin", "queued") for r in runs)
    assert all(r.requested_by == people["admin"] for r in runs)
    # Each gateway refreshes by its own stored policy.
    assert {r.gateway.prefix: r.options["apply"] for r in runs} == {
        "one": True,
        "two": False,
    }
    assert not RefreshRun.objects.filter(gateway__in=[off, caller, theirs]).exists()

    # The task the queue hands to a worker runs them.
    for run in runs:
        assert execute_run_task(run.pk) == "succeeded"
    assert ready[0].tools.count() == 3 and ready[1].tools.count() == 0


def test_refresh_selected_is_offered_only_with_the_refresh_permission(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    gateway = factories.GatewayFactory(tenant=tenant)
    client.force_login(people["no_refresh_perm"])
    page = client.get(CHANGELIST)
    assert "refresh_selected" not in page.content.decode()
    client.post(
        CHANGELIST, {"action": "refresh_selected", "_selected_action": [gateway.pk]}
    )
    assert not RefreshRun.objects.exists()


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_refresh_selected_runs_on_a_real_worker(
    celery_cluster: Any,
    broker: str,
    mcp_server_factory: Any,
    superuser: Any,
    tenant: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = mcp_server_factory(tools=4)
    gateways = [
        gateway_create(tenant=tenant, name=p, prefix=p, url=server.url)
        for p in ("alpha", "beta", "gamma")
    ]

    def publish(run_id: int) -> None:
        # This process's Celery app is not configured for the test broker.
        with app.connection_for_write(broker) as conn:
            execute_run_task.apply_async((run_id,), connection=conn)

    monkeypatch.setattr("refresh.hooks.enqueue_run", publish)
    celery_cluster.worker(queues="refresh")
    client = Client()
    client.force_login(superuser)

    page = client.post(
        CHANGELIST,
        {"action": "refresh_selected", "_selected_action": [g.pk for g in gateways]},
        follow=True,
    )

    assert "Queued 3 refreshes" in str(next(iter(page.context["messages"])))

    def done() -> bool:
        runs = RefreshRun.objects.filter(gateway__in=gateways)
        return runs.count() == 3 and all(r.status == "succeeded" for r in runs)

    wait_for(done, 60, "three refreshes done by the worker")
    assert all(g.tools.filter(active=True).count() == 4 for g in gateways)
    listing = client.get(CHANGELIST)
    admin = listing.context["cl"].model_admin
    for gateway in listing.context["cl"].result_list:
        assert ">applied<" in admin.last_refresh(gateway)
        assert gateway.active_tools == 4
