"""Skills after real catalog refreshes against the project's MCP test servers."""

from __future__ import annotations

import pytest

from gateways.services import gateway_create
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from skills.models import Skill
from skills.services import skill_create, skill_revision_create
from tests import factories
from tools.models import Tool

pytestmark = pytest.mark.django_db

API = RefreshRun.Trigger.API


def qualified(prefix: str, name: str) -> str:
    return f"{prefix}__{name}"


@pytest.fixture
def served(mcp_server_factory, tenant):
    """A real Streamable HTTP test server, registered and read once (applied)."""
    server = mcp_server_factory(tools=6, page_size=2)
    gateway = gateway_create(
        tenant=tenant, name="Test server", prefix="srv", url=server.url
    )
    run = refresh_gateway(
        gateway=gateway, trigger=API, options=RefreshOptions(apply=True)
    )
    assert run.applied and run.complete
    names = sorted(Tool.objects.filter(gateway=gateway).values_list("name", flat=True))
    return server, gateway, names


def item(run: RefreshRun, name: str) -> dict:
    return next(i for i in run.report["items"] if i["name"] == name)


def test_removed_tool_fails_the_skill_and_the_report_names_its_revisions(
    served, tenant
):
    server, gateway, names = served
    gone, kept, other = names[0], names[1], names[2]
    skill = skill_create(
        tenant=tenant,
        name="team/triage",
        tools=[qualified("srv", gone), qualified("srv", kept)],
    )
    assert skill.status == "ok"
    # Revision 2 no longer names `kept`; revision 1 still does.
    skill, created = skill_revision_create(
        skill=skill, tools=[qualified("srv", gone), qualified("srv", other)]
    )
    assert created and skill.revision_number == 2
    wrapper = skill_create(tenant=tenant, name="team/all", includes=["team/triage"])
    assert wrapper.status == "ok"

    assert sorted(server.remove_tools([gone, kept])) == [gone, kept]

    # The preview (dry run) already names the revisions; nothing is written.
    preview = refresh_gateway(gateway=gateway, trigger=API)
    assert not preview.applied
    assert item(preview, gone)["change"] == "disappeared"
    assert item(preview, gone)["referenced_by"] == ["team/triage@1", "team/triage@2"]
    assert item(preview, kept)["referenced_by"] == ["team/triage@1"]
    assert "skills" not in preview.report
    assert Skill.objects.get(name="team/triage").status == "ok"

    run = refresh_gateway(
        gateway=gateway,
        trigger=API,
        options=RefreshOptions(apply=True, deactivate_missing=True),
    )
    assert item(run, gone)["referenced_by"] == ["team/triage@1", "team/triage@2"]
    message = f"missing tools: srv__{gone}"
    assert run.report["skills"] == {
        "summary": "refreshed: 0, failed: 2, skipped: 0",
        "refreshed": [],
        "failed": {"team/all": message, "team/triage": message},
        "skipped": [],
    }
    stored = RefreshRun.objects.get(pk=run.pk)
    assert stored.report["skills"]["failed"]["team/triage"] == message
    skill = Skill.objects.get(name="team/triage")
    assert (skill.status, skill.error, skill.status_run_id) == (
        "failed",
        message,
        run.pk,
    )

    # The tool comes back: the next applied refresh (reactivating) heals the skill.
    server.add_tools([{"name": gone, "inputSchema": {"type": "object"}}])
    run = refresh_gateway(
        gateway=gateway,
        trigger=API,
        options=RefreshOptions(apply=True, reactivate_returning=True),
    )
    assert run.report["skills"]["summary"] == "refreshed: 2, failed: 0, skipped: 0"
    assert Skill.objects.get(name="team/triage").status == "ok"


def test_disappeared_but_kept_active_does_not_fail_the_skill(served, tenant):
    server, gateway, names = served
    skill_create(tenant=tenant, name="team/one", tools=[qualified("srv", names[0])])
    server.remove_tools([names[0]])
    run = refresh_gateway(
        gateway=gateway, trigger=API, options=RefreshOptions(apply=True)
    )
    # deactivate_missing off: the row stays active, so the skill still resolves,
    # but the report says which revision names the vanished tool.
    assert item(run, names[0])["action"] == "leave_active"
    assert item(run, names[0])["referenced_by"] == ["team/one@1"]
    assert run.report["skills"]["refreshed"] == ["team/one"]


def test_only_skills_naming_the_gateway_are_refreshed(served, tenant, catalog):
    server, gateway, names = served
    elsewhere = catalog("elsewhere", ["x"])
    skill_create(tenant=tenant, name="a/direct", tools=[qualified("srv", names[0])])
    skill_create(tenant=tenant, name="a/via", includes=["a/direct"])
    skill_create(tenant=tenant, name="a/via-via", includes=["a/via"])
    skill_create(tenant=tenant, name="a/unrelated", tools=["elsewhere__x"])
    # Another tenant's skill naming the same qualified tool is not touched.
    other = factories.TenantFactory(slug="other-tenant")
    factories.GatewayFactory(tenant=other, prefix="srv")
    skill_create(tenant=other, name="a/direct", tools=[qualified("srv", names[0])])
    run = refresh_gateway(
        gateway=gateway, trigger=API, options=RefreshOptions(apply=True)
    )
    assert run.report["skills"]["refreshed"] == ["a/direct", "a/via", "a/via-via"]
    assert elsewhere.pk != gateway.pk


def test_a_first_read_validates_skills_created_before_it(mcp_server_factory, tenant):
    server = mcp_server_factory(tools=3)
    gateway = gateway_create(tenant=tenant, name="New", prefix="fresh", url=server.url)
    skill = skill_create(
        tenant=tenant, name="early/bird", tools=["fresh__" + "placeholder"]
    )
    assert skill.status == "skipped"
    assert skill.error == "cannot conclude: gateway fresh has never been read"
    first = refresh_gateway(
        gateway=gateway, trigger=API, options=RefreshOptions(apply=True)
    )
    # The first complete read is conclusive: the placeholder tool does not exist.
    assert first.report["skills"]["failed"] == {
        "early/bird": "missing tools: fresh__placeholder"
    }
    real = Tool.objects.filter(gateway=gateway).values_list("name", flat=True)[0]
    skill, _ = skill_revision_create(
        skill=Skill.objects.get(name="early/bird"), tools=[f"fresh__{real}"]
    )
    assert skill.status == "ok"


def test_an_incomplete_read_skips_the_skills_it_cannot_judge(served, tenant):
    server, gateway, names = served
    skill_create(tenant=tenant, name="team/one", tools=[qualified("srv", names[-1])])
    server.fault("http_500", page=2)
    run = refresh_gateway(
        gateway=gateway, trigger=API, options=RefreshOptions(apply=True)
    )
    assert run.applied and not run.complete
    assert run.report["skills"]["skipped"] == ["team/one"]
    skill = Skill.objects.get(name="team/one")
    assert skill.status == "skipped"
    assert "the last read of gateway srv was incomplete" in skill.error


def test_a_failing_skills_step_leaves_the_catalog_apply_intact(
    served, tenant, monkeypatch
):
    server, gateway, names = served
    skill_create(tenant=tenant, name="team/one", tools=[qualified("srv", names[0])])
    server.remove_tools([names[0]])

    def explode(*args, **kwargs):
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT 1/0")  # a real database error mid-step

    monkeypatch.setattr("skills.registry.SkillRegistry._refresh", explode)
    run = refresh_gateway(
        gateway=gateway,
        trigger=API,
        options=RefreshOptions(apply=True, deactivate_missing=True),
    )
    assert run.status == "succeeded" and run.applied
    assert not Tool.objects.get(gateway=gateway, name=names[0]).active
    assert run.report["skills"]["error"].startswith("the skills could not be refreshed")
    assert Skill.objects.get(name="team/one").status == "ok"


def test_the_cli_text_report_shows_the_skills_section():
    from refresh.report import render_report_text

    text = render_report_text(
        {
            "prefix": "srv",
            "source": "http://x",
            "run_id": 1,
            "trigger": "cli",
            "duration_ms": 5,
            "items": [],
            "summary": {},
            "applied": True,
            "complete": True,
            "note": "Applied.",
            "skills": {
                "summary": "refreshed: 1, failed: 1, skipped: 0",
                "refreshed": ["a/ok"],
                "failed": {"a/bad": "missing tools: srv__x"},
                "skipped": [],
            },
        }
    )
    assert "Skills: refreshed: 1, failed: 1, skipped: 0\n" in text
    assert "  failed a/bad: missing tools: srv__x\n" in text
