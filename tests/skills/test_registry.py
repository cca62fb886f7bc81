"""SkillRegistry against the database: every row of SPEC 8's behaviour."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from skills.exceptions import SKILL_NOT_FOUND, SkillError, SkillNotFound
from skills.models import Skill
from skills.registry import SkillRefreshResult, SkillRegistry
from tests import factories
from tools.models import Tool

pytestmark = pytest.mark.django_db


def test_refresh_all_found_is_refreshed(tenant, catalog, make_skill):
    catalog("gw", ["search", "fetch"])
    make_skill("acme/web", ["gw__search", "gw__fetch"])
    result = SkillRegistry(tenant=tenant).refresh("acme/web")
    assert result == SkillRefreshResult(refreshed=["acme/web"])
    skill = Skill.objects.get(name="acme/web")
    assert (skill.status, skill.error, skill.missing) == ("ok", "", [])
    assert skill.resolved_tools == ["gw__fetch", "gw__search"]


def test_missing_references_fail_with_the_names(tenant, catalog, make_skill):
    gateway = catalog("gw", ["search"], inactive=["old"])
    make_skill("acme/web", ["gw__search", "gw__old", "gw__never", "other__x"])
    result = SkillRegistry(tenant=tenant).refresh("acme/web")
    assert result.failed == {"acme/web": "missing tools: gw__never, gw__old, other__x"}
    skill = Skill.objects.get(name="acme/web")
    assert skill.status == "failed"
    assert skill.missing == ["gw__never", "gw__old", "other__x"]
    # Deactivating the last one too keeps it failing, now with all four.
    Tool.objects.filter(gateway=gateway, name="search").update(
        active=False, deactivated_at=timezone.now()
    )
    result = SkillRegistry(tenant=tenant).refresh("acme/web")
    assert "gw__search" in result.failed["acme/web"]


def test_include_cycle_fails_with_the_cycle(tenant, catalog, make_skill):
    catalog("gw", ["a", "b"])
    make_skill("acme/one", ["gw__a"], ["acme/two"])
    make_skill("acme/two", ["gw__b"], ["acme/one"])
    make_skill("acme/outer", [], ["acme/one"])
    result = SkillRegistry(tenant=tenant).refresh_all()
    message = "include cycle: acme/one -> acme/two -> acme/one"
    assert result.failed == {
        "acme/one": message,
        "acme/outer": message,
        "acme/two": message,
    }
    assert Skill.objects.get(name="acme/outer").resolved_tools == ["gw__a", "gw__b"]


def test_missing_include_fails_with_that_error(tenant, catalog, make_skill):
    catalog("gw", ["a"])
    make_skill("acme/top", ["gw__a"], ["acme/not-yet"])
    result = SkillRegistry(tenant=tenant).refresh("acme/top")
    assert result.failed == {
        "acme/top": "missing include: acme/not-yet (included by acme/top)"
    }
    # Creating the included skill recomputes the includer at once.
    make_skill("acme/not-yet", ["gw__a"])
    assert Skill.objects.get(name="acme/top").status == "ok"


@pytest.mark.parametrize(
    ("complete", "reason"),
    [
        (False, "the last read of gateway part was incomplete"),
        (None, "gateway part has never been read"),
    ],
)
def test_unknown_or_incomplete_catalog_is_skipped(
    tenant, catalog, make_skill, complete, reason
):
    catalog("gw", ["a"])
    catalog("part", ["b"], complete=complete)
    make_skill("acme/mixed", ["gw__a", "part__b"])
    make_skill("acme/gone", ["part__not-there"])
    result = SkillRegistry(tenant=tenant).refresh_all()
    assert result == SkillRefreshResult(skipped=["acme/gone", "acme/mixed"])
    skill = Skill.objects.get(name="acme/mixed")
    assert skill.status == "skipped"
    assert skill.error == f"cannot conclude: {reason}"


def test_unknown_name_raises_skill_not_found(tenant, make_skill):
    make_skill("acme/known", [])
    with pytest.raises(SkillNotFound) as caught:
        SkillRegistry(tenant=tenant).refresh("acme/unknown")
    assert caught.value.code == SKILL_NOT_FOUND == "SKILL_NOT_FOUND"
    assert isinstance(caught.value, SkillError)
    assert caught.value.status == 404


def test_another_tenants_skill_and_tools_are_invisible(tenant, catalog, make_skill):
    other = factories.TenantFactory(slug="other")
    catalog("gw", ["a"], tenant_=other)
    make_skill("acme/theirs", ["gw__a"], tenant_=other)
    make_skill("acme/mine", ["gw__a"])
    with pytest.raises(SkillNotFound):
        SkillRegistry(tenant=tenant).refresh("acme/theirs")
    # Their gateway "gw" does not satisfy my reference to gw__a.
    assert SkillRegistry(tenant=tenant).refresh("acme/mine").failed == {
        "acme/mine": "missing tools: gw__a"
    }
    assert SkillRegistry(tenant=other).refresh_all().refreshed == ["acme/theirs"]


def test_refresh_one_name_follows_includes_it_did_not_load(tenant, catalog, make_skill):
    catalog("gw", ["a", "b", "c"])
    make_skill("lib/c", ["gw__c"])
    make_skill("lib/b", ["gw__b"], ["lib/c"])
    make_skill("app/top", ["gw__a"], ["lib/b"])
    Tool.objects.filter(name="c").update(active=False, deactivated_at=timezone.now())
    result = SkillRegistry(tenant=tenant).refresh("app/top")
    assert result.failed == {"app/top": "missing tools: gw__c"}
    # Only the named skill is recorded; lib/c keeps its last status.
    assert Skill.objects.get(name="lib/c").status == "ok"


def test_refresh_all_aggregates_and_logs_the_summary(
    tenant, catalog, make_skill, caplog
):
    catalog("gw", ["a", "b"])
    catalog("part", ["p"], complete=False)
    make_skill("x/one", ["gw__a"])
    make_skill("x/two", ["gw__b"])
    make_skill("x/three", [], ["x/one", "x/two"])
    make_skill("x/four", ["gw__missing"])
    make_skill("x/five", ["part__p"])
    caplog.set_level(logging.INFO, logger="toolsync.skills")
    caplog.clear()
    result = SkillRegistry(tenant=tenant).refresh_all()
    assert result.to_summary() == "refreshed: 3, failed: 1, skipped: 1"
    assert result.refreshed == ["x/one", "x/three", "x/two"]
    assert result.failed == {"x/four": "missing tools: gw__missing"}
    assert result.skipped == ["x/five"]
    records = [r for r in caplog.records if r.name == "toolsync.skills"]
    assert [r.levelno for r in records] == [logging.INFO]
    assert "refreshed: 3, failed: 1, skipped: 1" in records[0].getMessage()


def test_refresh_writes_only_changed_outcomes(tenant, catalog, make_skill):
    catalog("gw", ["a"])
    make_skill("x/one", ["gw__a"])
    make_skill("x/two", ["gw__gone"])
    before = dict(Skill.objects.values_list("name", "updated_at"))
    with CaptureQueriesContext(connection) as queries:
        SkillRegistry(tenant=tenant).refresh_all()
    assert not [q for q in queries if q["sql"].lstrip().upper().startswith("UPDATE")]
    assert dict(Skill.objects.values_list("name", "updated_at")) == before


def _bulk_skills(tenant, gateway, count: int, start: int = 0) -> None:
    """Layered skills: every fifth includes the previous one (depth grows)."""
    from skills.services import skill_create

    for i in range(start, start + count):
        includes = [f"bulk/s{i - 1}"] if i % 5 and i > start else []
        skill_create(
            tenant=tenant,
            name=f"bulk/s{i}",
            tools=[f"{gateway.prefix}__t{i % 7}", f"{gateway.prefix}__t{(i + 3) % 7}"],
            includes=includes,
        )


@pytest.mark.postgres
def test_refresh_all_query_count_does_not_grow_with_skills(tenant, catalog):
    gateway = catalog("gw", [f"t{i}" for i in range(7)])
    registry = SkillRegistry(tenant=tenant)

    def count_queries() -> int:
        # Flip every outcome so each run writes every skill.
        Tool.objects.filter(gateway=gateway).update(
            active=False, deactivated_at=timezone.now()
        )
        registry.refresh_all()
        Tool.objects.filter(gateway=gateway).update(active=True, deactivated_at=None)
        with CaptureQueriesContext(connection) as queries:
            result = registry.refresh_all()
        assert result.total_refreshed == Skill.objects.count()
        return len(queries)

    _bulk_skills(tenant, gateway, 10)
    small = count_queries()
    _bulk_skills(tenant, gateway, 90, start=10)
    large = count_queries()
    assert small == large
    assert large <= 8
