"""The skills admin in a real browser (Chromium through Playwright)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission

from skills.models import Skill
from tests import browser, factories

PASSWORD = "browser-pw-123"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def tenant_admin(tenant: Any, username: str = "skiller") -> Any:
    user = factories.UserFactory(username=username, is_staff=True, password=PASSWORD)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="skills")
    )
    factories.MembershipFactory(user=user, tenant=tenant, role="admin")
    return user


def log_in(page: Any, username: str) -> None:
    browser.log_in(page, username, PASSWORD)


def test_create_see_failure_fix_and_see_revisions(page, tenant, catalog):
    catalog("gw", ["search", "fetch"])
    factories.TenantFactory(slug="not-mine")
    tenant_admin(tenant)
    log_in(page, "skiller")

    page.goto("/admin/skills/skill/add/")
    # Only the tenant the user administers is offered.
    options = page.locator("#id_tenant option").all_inner_texts()
    assert [o for o in options if o.strip("-")] == [tenant.slug]
    page.select_option("#id_tenant", label=tenant.slug)
    page.fill("#id_name", "web/research")
    page.fill("#id_tools", "gw__search\ngw__vanished")
    page.click("input[name=_continue]")

    page.wait_for_selector(".sk-badge.sk-failed")
    assert page.locator(".sk-missing").all_inner_texts() == ["gw__vanished"]
    assert "missing tools: gw__vanished" in page.content()

    page.fill("#id_tools", "gw__search\ngw__fetch")
    page.click("input[name=_continue]")
    page.wait_for_selector(".sk-badge.sk-ok")
    inline = page.locator("#revisions-group").inner_text()
    assert "gw__fetch" in inline and "gw__vanished" in inline  # both revisions
    skill = Skill.objects.get(name="web/research")
    assert skill.revision_number == 2 and skill.status == "ok"


def test_a_bad_line_is_shown_on_the_form(page, tenant, catalog):
    catalog("gw", ["search"])
    tenant_admin(tenant)
    log_in(page, "skiller")
    page.goto("/admin/skills/skill/add/")
    page.select_option("#id_tenant", label=tenant.slug)
    page.fill("#id_name", "web/bad")
    page.fill("#id_tools", "gw__search\nnot a tool")
    page.click("input[name=_save]")
    page.wait_for_selector(".errorlist")
    assert "line 2:" in page.locator(".errorlist").first.inner_text()
    assert not Skill.objects.filter(name="web/bad").exists()


def test_preview_names_the_revisions_then_apply_fails_the_skill(
    page, tenant, mcp_server_factory
):
    """Issue 7's "done when", end to end through the gateway's Refresh pages."""
    from gateways.services import gateway_create
    from refresh.models import RefreshRun
    from refresh.options import RefreshOptions
    from refresh.services import refresh_gateway
    from skills.services import skill_create, skill_revision_create
    from tools.models import Tool

    server = mcp_server_factory(tools=5)
    gateway = gateway_create(tenant=tenant, name="Demo", prefix="demo", url=server.url)
    refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.CLI,
        options=RefreshOptions(apply=True),
    )
    first, second, third = sorted(
        Tool.objects.filter(gateway=gateway).values_list("name", flat=True)
    )[:3]
    skill = skill_create(
        tenant=tenant, name="demo/triage", tools=[f"demo__{first}", f"demo__{second}"]
    )
    skill_revision_create(skill=skill, tools=[f"demo__{first}", f"demo__{third}"])
    server.remove_tools([first])
    user = tenant_admin(tenant)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="gateways",
            codename__in=["view_gateway", "change_gateway", "refresh_gateway"],
        )
    )
    log_in(page, "skiller")

    page.goto(f"/admin/gateways/gateway/{gateway.pk}/refresh/")
    page.click("#ts-refresh-submit")
    page.wait_for_url(f"**/admin/gateways/gateway/{gateway.pk}/refresh/*/")
    preview = page.content()
    assert "demo/triage@1" in preview and "demo/triage@2" in preview
    assert Skill.objects.get(name="demo/triage").status == "ok"  # nothing applied yet

    # Another option is another plan: first its preview, then Apply writes it.
    page.check("#id_deactivate_missing")
    page.click("#ts-apply")
    page.wait_for_selector(".messagelist .warning")
    assert Skill.objects.get(name="demo/triage").status == "ok"
    page.click("#ts-apply")
    page.wait_for_selector(".messagelist .success")
    skill.refresh_from_db()
    assert (skill.status, skill.missing) == ("failed", [f"demo__{first}"])
    page.goto(f"/admin/skills/skill/{skill.pk}/change/")
    assert page.locator(".sk-missing").all_inner_texts() == [f"demo__{first}"]
