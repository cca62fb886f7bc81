"""Skills API (SPEC 6, 8): roles, tenancy (404 not 403), validation, results."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from skills.models import Skill, SkillRevision
from skills.services import skill_create, skill_revision_create
from tests import factories

pytestmark = pytest.mark.django_db

LIST = "/api/skills/"
REFRESH = "/api/skills/refresh"


def client_for(tenant, role: str, username: str | None = None) -> APIClient:
    user = factories.UserFactory(username=username or f"{role}-{tenant.slug}")
    factories.MembershipFactory(user=user, tenant=tenant, role=role)
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def world(tenant, catalog):
    catalog("gw", ["a", "b"])
    other = factories.TenantFactory(slug="other-co")
    ok = skill_create(tenant=tenant, name="team/ok", tools=["gw__a"])
    broken = skill_create(tenant=tenant, name="team/broken", tools=["gw__gone"])
    theirs = skill_create(tenant=other, name="their/skill", tools=[])
    return {"ok": ok, "broken": broken, "theirs": theirs, "other": other}


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]


def fields_of(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in error_of(response)["details"]["errors"]}


# -- reading ----------------------------------------------------------------


def test_list_shows_only_the_callers_tenants(world, tenant):
    response = client_for(tenant, "viewer").get(LIST)
    assert response.status_code == 200
    body = response.json()
    assert set(body) >= {"count", "next", "previous", "results"}
    assert [s["name"] for s in body["results"]] == ["team/broken", "team/ok"]
    broken = body["results"][0]
    assert broken == {
        "id": world["broken"].pk,
        "tenant": tenant.slug,
        "name": "team/broken",
        "revision": 1,
        "tools": ["gw__gone"],
        "includes": [],
        "resolved_tools": ["gw__gone"],
        "status": "failed",
        "error": "missing tools: gw__gone",
        "missing": ["gw__gone"],
        "status_changed_at": broken["status_changed_at"],
        "created_at": broken["created_at"],
        "updated_at": broken["updated_at"],
    }


def test_list_filters(world, tenant):
    client = client_for(tenant, "viewer")
    assert [
        s["name"] for s in client.get(LIST, {"status": "ok"}).json()["results"]
    ] == ["team/ok"]
    assert client.get(LIST, {"namespace": "team"}).json()["count"] == 2
    assert client.get(LIST, {"name": "their/skill"}).json()["count"] == 0


def test_list_query_count_does_not_grow_with_skills(tenant, catalog):
    catalog("gw", ["a"])
    client = client_for(tenant, "viewer")

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(LIST, {"page_size": 100}).status_code == 200
        return len(queries)

    for i in range(3):
        skill_create(tenant=tenant, name=f"n/s{i}", tools=["gw__a"])
    few = count()
    for i in range(3, 30):
        skill_create(tenant=tenant, name=f"n/s{i}", tools=["gw__a"])
    assert count() == few


def test_another_tenants_skill_is_a_404_not_a_403(world, tenant):
    client = client_for(tenant, "owner")
    theirs = world["theirs"].pk
    for response in (
        client.get(f"{LIST}{theirs}/"),
        client.get(f"{LIST}{theirs}/revisions/"),
        client.post(f"{LIST}{theirs}/revisions/", {"tools": []}, format="json"),
    ):
        assert response.status_code == 404
        assert error_of(response)["code"] == "not_found"
    assert SkillRevision.objects.filter(skill_id=theirs).count() == 1


def test_anonymous_is_refused(world):
    anonymous = APIClient()
    assert anonymous.get(LIST).status_code == 401
    assert anonymous.post(REFRESH, {}, format="json").status_code == 401


def test_revision_history_newest_first(world, tenant):
    skill_revision_create(skill=world["ok"], tools=["gw__a", "gw__b"])
    response = client_for(tenant, "viewer").get(f"{LIST}{world['ok'].pk}/revisions/")
    assert response.status_code == 200
    revisions = response.json()["results"]
    assert [r["number"] for r in revisions] == [2, 1]
    assert revisions[0]["tools"] == ["gw__a", "gw__b"]


# -- writing ----------------------------------------------------------------


def test_admin_creates_a_skill_at_revision_one(world, tenant):
    client = client_for(tenant, "admin", "boss")
    response = client.post(
        LIST,
        {"name": "team/new", "tools": ["gw__a", "gw__b"], "includes": ["team/ok"]},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["revision"], body["status"]) == ("team/new", 1, "ok")
    assert body["resolved_tools"] == ["gw__a", "gw__b"]
    assert Skill.objects.get(pk=body["id"]).current_revision.author.username == "boss"


@pytest.mark.parametrize("role", ["viewer", "member"])
def test_below_admin_cannot_create_or_revise(world, tenant, role):
    client = client_for(tenant, role)
    response = client.post(LIST, {"name": "team/new", "tools": []}, format="json")
    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"
    url = f"{LIST}{world['ok'].pk}/revisions/"
    assert client.post(url, {"tools": []}, format="json").status_code == 403
    assert not Skill.objects.filter(name="team/new").exists()
    assert SkillRevision.objects.filter(skill=world["ok"]).count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "NoNamespace", "tools": []}, "name"),
        ({"name": "team/x", "tools": ["gw__a", "not a tool"]}, "tools.1"),
        ({"name": "team/x", "tools": ["gw__a", "gw__a"]}, "tools.1"),
        ({"name": "team/x", "tools": "gw__a"}, "tools"),
        ({"name": "team/x", "tools": [None]}, "tools.0"),
        ({"name": "team/x", "includes": ["team/x"]}, "includes.0"),
        ({"name": "team/x", "tools": [], "aply": True}, "aply"),
        ({"name": "team/ok", "tools": []}, "name"),
        ({"tools": []}, "name"),
    ],
)
def test_invalid_create_is_a_422_with_the_field_path(world, tenant, body, field):
    response = client_for(tenant, "admin").post(LIST, body, format="json")
    assert response.status_code == 422, response.json()
    error = error_of(response)
    assert error["code"] == "validation_error"
    assert field in fields_of(response), error
    assert Skill.objects.filter(tenant=tenant).count() == 2


def test_create_names_the_tenant_when_the_caller_has_several(world, tenant):
    from django.contrib.auth import get_user_model

    client = client_for(tenant, "admin", "multi")
    second = factories.TenantFactory(slug="second-co")
    factories.MembershipFactory(
        user=get_user_model().objects.get(username="multi"), tenant=second, role="admin"
    )
    response = client.post(LIST, {"name": "x/y", "tools": []}, format="json")
    assert response.status_code == 422 and "tenant" in fields_of(response)
    response = client.post(
        LIST, {"name": "x/y", "tools": [], "tenant": "second-co"}, format="json"
    )
    assert response.status_code == 201
    assert Skill.objects.get(name="x/y").tenant == second
    # A tenant the caller does not belong to reads as unknown.
    response = client.post(
        LIST, {"name": "x/z", "tools": [], "tenant": "other-co"}, format="json"
    )
    assert response.status_code == 422
    assert fields_of(response)["tenant"] == "No such tenant."


def test_admin_adds_a_revision_and_same_content_writes_nothing(world, tenant):
    client = client_for(tenant, "admin")
    url = f"{LIST}{world['broken'].pk}/revisions/"
    response = client.post(url, {"tools": ["gw__a"]}, format="json")
    assert response.status_code == 201
    assert (response.json()["revision"], response.json()["status"]) == (2, "ok")
    again = client.post(url, {"tools": ["gw__a"]}, format="json")
    assert again.status_code == 200 and again.json()["revision"] == 2
    bad = client.post(url, {"tools": ["gw__a"], "name": "x/renamed"}, format="json")
    assert bad.status_code == 422 and "name" in fields_of(bad)


# -- refresh ----------------------------------------------------------------


def test_member_refreshes_one_skill_or_all(world, tenant):
    client = client_for(tenant, "member")
    response = client.post(REFRESH, {"name": "team/ok"}, format="json")
    assert response.status_code == 200
    assert response.json() == {
        "refreshed": ["team/ok"],
        "failed": {},
        "skipped": [],
        "summary": "refreshed: 1, failed: 0, skipped: 0",
    }
    response = client.post(REFRESH, {}, format="json")
    assert response.status_code == 200
    assert response.json() == {
        "refreshed": ["team/ok"],
        "failed": {"team/broken": "missing tools: gw__gone"},
        "skipped": [],
        "summary": "refreshed: 1, failed: 1, skipped: 0",
    }
    assert client.post(REFRESH, {"name": None}, format="json").status_code == 200


def test_refresh_of_an_unknown_name_is_skill_not_found(world, tenant):
    client = client_for(tenant, "member")
    for name in ("team/nope", "their/skill"):
        response = client.post(REFRESH, {"name": name}, format="json")
        assert response.status_code == 404
        error = error_of(response)
        assert error["code"] == "SKILL_NOT_FOUND"
        assert error["details"] == {"name": name}


def test_viewer_cannot_refresh(world, tenant):
    response = client_for(tenant, "viewer").post(REFRESH, {}, format="json")
    assert response.status_code == 403


def test_refresh_rejects_unknown_fields(world, tenant):
    response = client_for(tenant, "member").post(
        REFRESH, {"names": ["team/ok"]}, format="json"
    )
    assert response.status_code == 422 and "names" in fields_of(response)


def test_bearer_token_reads_and_a_bad_token_is_a_401(world, tenant):
    from knox.models import AuthToken

    user = factories.UserFactory(username="script")
    factories.MembershipFactory(user=user, tenant=tenant, role="member")
    _, token = AuthToken.objects.create(user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get(LIST).json()["count"] == 2
    assert client.post(REFRESH, {"name": "team/ok"}).status_code == 200
    client.credentials(HTTP_AUTHORIZATION="Bearer tsk_not-a-real-token")
    response = client.get(LIST)
    assert response.status_code == 401
    assert error_of(response)["code"] == "authentication_failed"
