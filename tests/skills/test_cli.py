"""`manage.py refresh_skills`."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tests import factories

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("refresh_skills", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code), out.getvalue()
    return 0, out.getvalue()


def test_all_tenants_and_exit_code(tenant, catalog, make_skill):
    catalog("gw", ["a"])
    make_skill("a/ok", ["gw__a"])
    make_skill("a/bad", ["gw__gone"])
    other = factories.TenantFactory(slug="zzz")
    make_skill("b/ok", [], tenant_=other)
    code, out = run()
    assert code == 1
    assert f"{tenant.slug}: refreshed: 1, failed: 1, skipped: 0" in out
    assert "  failed a/bad: missing tools: gw__gone" in out
    assert "zzz: refreshed: 1, failed: 0, skipped: 0" in out


def test_one_name_as_json(tenant, catalog, make_skill):
    catalog("gw", ["a"])
    make_skill("a/ok", ["gw__a"])
    code, out = run("--tenant", tenant.slug, "--name", "a/ok", "--json")
    assert code == 0
    assert json.loads(out) == {
        tenant.slug: {
            "summary": "refreshed: 1, failed: 0, skipped: 0",
            "refreshed": ["a/ok"],
            "failed": {},
            "skipped": [],
        }
    }


def test_unknown_name_and_tenant_are_errors(tenant):
    with pytest.raises(CommandError, match="SKILL_NOT_FOUND"):
        run("--tenant", tenant.slug, "--name", "a/none")
    with pytest.raises(CommandError, match="no tenant"):
        run("--tenant", "nope")
    with pytest.raises(CommandError, match="needs --tenant"):
        run("--name", "a/none")
