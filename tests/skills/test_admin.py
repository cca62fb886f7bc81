"""Skills admin: pages, writes through services, and tenant scoping."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from skills.models import Skill, SkillRevision
from skills.services import skill_create
from tests import factories

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:skills_skill_changelist"


def staff(tenant, role: str, username: str):
    user = factories.UserFactory(username=username, is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="skills")
    )
    factories.MembershipFactory(user=user, tenant=tenant, role=role)
    return user


@pytest.fixture
def two_tenants(tenant, catalog):
    other = factories.TenantFactory(slug="other")
    catalog("gw", ["a", "b"])
    mine = skill_create(tenant=tenant, name="mine/web", tools=["gw__a"])
    theirs = skill_create(tenant=other, name="theirs/web", tools=[])
    return mine, theirs, other


def management(count: int) -> dict[str, str]:
    return {
        "revisions-TOTAL_FORMS": str(count),
        "revisions-INITIAL_FORMS": str(count),
        "revisions-MIN_NUM_FORMS": "0",
        "revisions-MAX_NUM_FORMS": "1000",
    }


def test_superuser_sees_every_tenant(client, two_tenants, admin_user):
    client.force_login(admin_user)
    page = client.get(reverse(CHANGELIST))
    assert page.status_code == 200
    assert b"mine/web" in page.content and b"theirs/web" in page.content


def test_tenant_admin_sees_only_their_tenant(client, two_tenants, tenant):
    mine, theirs, _ = two_tenants
    client.force_login(staff(tenant, "admin", "boss"))
    page = client.get(reverse(CHANGELIST))
    assert b"mine/web" in page.content and b"theirs/web" not in page.content
    url = reverse("admin:skills_skill_change", args=[theirs.pk])
    assert client.get(url).status_code == 404
    assert client.post(url, {"tools": "", **management(1)}).status_code == 404
    assert SkillRevision.objects.filter(skill=theirs).count() == 1
    delete = reverse("admin:skills_skill_delete", args=[theirs.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 404
    assert Skill.objects.filter(pk=theirs.pk).exists()


def test_member_below_admin_sees_nothing(client, two_tenants, tenant):
    client.force_login(staff(tenant, "member", "helper"))
    page = client.get(reverse(CHANGELIST))
    assert b"mine/web" not in page.content


def test_change_page_shows_status_resolved_tools_and_revisions(
    client, two_tenants, admin_user
):
    mine, _, _ = two_tenants
    client.force_login(admin_user)
    page = client.get(reverse("admin:skills_skill_change", args=[mine.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "gw__a" in text and "sk-ok" in text
    assert "Next revision" in text


def test_add_creates_revision_one_through_the_service(client, tenant, catalog):
    catalog("gw", ["a"])
    client.force_login(staff(tenant, "admin", "boss"))
    response = client.post(
        reverse("admin:skills_skill_add"),
        {
            "tenant": tenant.pk,
            "name": "team/new",
            "tools": "gw__a\n\n gw__missing \n",
            "includes": "",
            **management(0),
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    skill = Skill.objects.get(name="team/new")
    assert skill.revision_number == 1
    assert skill.current_revision.tools == ["gw__a", "gw__missing"]
    assert skill.current_revision.author.username == "boss"
    assert (skill.status, skill.missing) == ("failed", ["gw__missing"])


def test_add_offers_only_tenants_in_scope(client, two_tenants, tenant):
    _, _, other = two_tenants
    client.force_login(staff(tenant, "admin", "boss"))
    response = client.post(
        reverse("admin:skills_skill_add"),
        {"tenant": other.pk, "name": "sneaky/x", "tools": "", **management(0)},
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not Skill.objects.filter(name="sneaky/x").exists()


def test_bad_lines_are_form_errors_and_nothing_is_written(client, two_tenants, tenant):
    mine, _, _ = two_tenants
    client.force_login(staff(tenant, "admin", "boss"))
    response = client.post(
        reverse("admin:skills_skill_change", args=[mine.pk]),
        {"tools": "gw__a\nnot a tool\ngw__a", "includes": "mine/web", **management(1)},
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "line 2:" in text and "line 3:" in text and "cannot include itself" in text
    assert SkillRevision.objects.filter(skill=mine).count() == 1


def test_change_adds_a_revision(client, two_tenants, tenant):
    mine, _, _ = two_tenants
    client.force_login(staff(tenant, "admin", "boss"))
    url = reverse("admin:skills_skill_change", args=[mine.pk])
    response = client.post(url, {"tools": "gw__a\ngw__b", **management(1)})
    assert response.status_code == 302
    mine.refresh_from_db()
    assert mine.revision_number == 2
    assert mine.resolved_tools == ["gw__a", "gw__b"]
    page = client.get(url).content.decode()
    assert page.count("gw__b") >= 2  # resolved set and revision 2 in the inline


def test_revalidate_action_reports_the_summary(client, two_tenants, tenant):
    mine, theirs, _ = two_tenants
    client.force_login(staff(tenant, "admin", "boss"))
    response = client.post(
        reverse(CHANGELIST),
        {"action": "revalidate", "_selected_action": [mine.pk, theirs.pk]},
        follow=True,
    )
    text = response.content.decode()
    # Only the in-scope skill is re-validated.
    assert "Re-validated: refreshed: 1, failed: 0, skipped: 0." in text


def test_delete_goes_through_the_service(client, tenant, catalog, admin_user):
    catalog("gw", ["a"])
    base = skill_create(tenant=tenant, name="lib/base", tools=["gw__a"])
    skill_create(tenant=tenant, name="app/top", includes=["lib/base"])
    client.force_login(admin_user)
    response = client.post(
        reverse("admin:skills_skill_delete", args=[base.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert Skill.objects.get(name="app/top").status == "failed"
