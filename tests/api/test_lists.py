"""Every list endpoint: the page shape of SPEC 6, scoped rows, and a constant number
of queries per page however many rows there are (no N+1)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from refresh.models import RefreshRun
from skills.services import skill_create
from tests import factories
from tests.api.conftest import World

pytestmark = pytest.mark.django_db


def add_gateways(world: World, n: int, start: int) -> None:
    for i in range(start, start + n):
        factories.GatewayFactory(tenant=world.tenant, prefix=f"g{i}")


def add_runs(world: World, n: int, start: int) -> None:
    user = world.users["member"]
    RefreshRun.objects.bulk_create(
        RefreshRun(
            gateway=world.gateway,
            trigger="api",
            requested_by=user,
            status="succeeded",
            report={"note": "x" * 1000},
        )
        for _ in range(n)
    )


def add_skills(world: World, n: int, start: int) -> None:
    for i in range(start, start + n):
        skill_create(
            tenant=world.tenant, name=f"bulk/s{i}", tools=["crm__search_contacts"]
        )


def add_tools(world: World, n: int, start: int) -> None:
    for i in range(start, start + n):
        factories.ToolFactory(gateway=world.gateway, name=f"t{i}")


@pytest.mark.parametrize(
    ("path", "grow"),
    [
        ("/api/gateways/", add_gateways),
        ("/api/refresh-runs/", add_runs),
        ("/api/skills/", add_skills),
        ("/api/tools/", add_tools),
    ],
)
@pytest.mark.parametrize("auth", ["token", "session"])
def test_query_count_per_page_is_constant(
    world: World, path: str, grow: Callable[..., None], auth: str
) -> None:
    if auth == "token":
        client = world.client("viewer")
    else:
        client = world.client("anonymous")
        client.force_login(world.users["viewer"])

    def page() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path, {"page_size": 1000})
        assert response.status_code == 200, response.content
        body = response.json()
        assert set(body) == {"count", "next", "previous", "results"}
        return len(body["results"]), len(queries)

    few_rows, few = page()
    grow(world, 40, 1000)
    many_rows, many = page()
    assert many_rows >= few_rows + 40
    assert many == few, (
        f"{path}: {few} queries for {few_rows} rows, {many} for {many_rows}"
    )


def test_refresh_run_list_leaves_reports_out_and_filters(world: World) -> None:
    factories.RefreshRunFactory(gateway=world.gateway, status="failed", trigger="cli")
    client = world.client("viewer")
    body = client.get("/api/refresh-runs/").json()
    assert body["count"] == 2 and "report" not in body["results"][0]
    assert client.get("/api/refresh-runs/", {"status": "failed"}).json()["count"] == 1
    assert client.get("/api/refresh-runs/", {"trigger": "cli"}).json()["count"] == 1
    assert client.get("/api/refresh-runs/", {"applied": "false"}).json()["count"] == 2
    rival = client.get("/api/refresh-runs/", {"gateway": world.rival_gateway.pk})
    assert rival.json()["count"] == 0
    detail = client.get(f"/api/refresh-runs/{world.run.pk}/").json()
    assert {
        "id",
        "gateway",
        "trigger",
        "status",
        "reason",
        "applied",
        "complete",
        "summary",
        "started_at",
        "finished_at",
        "report",
    } <= set(detail)


def test_session_auth_serves_the_browsable_api_and_wants_csrf(world: World) -> None:
    from rest_framework.test import APIClient

    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.users["admin"])
    page = client.get("/api/tools/", HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and b"<html" in page.content.lower()
    # A session without the CSRF token cannot write (a token client needs none).
    response = client.patch(
        f"/api/tools/{world.tools[0].pk}/", {"alias": "x"}, format="json"
    )
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]
    response = APIClient().get("/api/tools/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
