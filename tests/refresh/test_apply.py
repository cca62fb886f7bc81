"""Apply (SPEC 3.4) against the real database, with the probe faked."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from refresh.exceptions import RefreshError
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tools.models import Tool, ToolRevision
from tools.services import tool_approve, tool_update_local

pytestmark = pytest.mark.django_db


def tool(name, description="d", **extra):
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object"},
        **extra,
    }


def run(gateway, **options):
    return refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.API,
        options=RefreshOptions(**options),
    )


def catalog_state():
    """Everything a refresh may write in the catalog, for before/after equality."""
    tools = list(Tool.objects.order_by("id").values())
    revisions = list(ToolRevision.objects.order_by("id").values())
    for row in tools:
        row.pop("updated_at")
    return tools, revisions


def test_dry_run_is_the_default_and_writes_nothing(gateway, fake_probe):
    fake_probe.set_tools([tool("a"), tool("b")])
    result = run(gateway)
    assert result.status == "succeeded" and result.applied is False
    assert result.report["summary"]["added"] == 2
    assert "nothing in the catalog was written" in result.report["note"]
    assert Tool.objects.count() == 0 and ToolRevision.objects.count() == 0


def test_added_rows_are_write_gated_pending_with_revision_one(gateway, fake_probe):
    fake_probe.set_tools([tool("ro", annotations={"readOnlyHint": True})])
    result = run(gateway, apply=True, apply_effect=True)
    created = Tool.objects.get(name="ro")
    assert (created.effect, created.gated, created.review_state) == (
        "write",
        True,
        "pending",
    )
    assert created.current_revision == 1 and created.active
    revision = created.revisions.get()
    assert revision.number == 1 and revision.refresh_run_id == result.pk
    assert revision.spec["annotations"] == {"readOnlyHint": True}
    (item,) = result.report["items"]
    assert (item["effect_hint"], item["effect_after"], item["action"]) == (
        "read",
        "write",
        "create",
    )


def test_update_writes_server_fields_and_a_revision_never_local_fields(
    gateway, fake_probe
):
    fake_probe.set_tools([tool("x", "old")])
    run(gateway, apply=True)
    row = Tool.objects.get(name="x")
    tool_update_local(
        tool=row,
        fields={
            "alias": "My X",
            "tags": ["crm"],
            "admin_notes": "keep",
            "gated": False,
            "effect": "read",
        },
    )
    fake_probe.set_tools([tool("x", "new", title="X")])
    result = run(gateway, apply=True)
    row.refresh_from_db()
    assert (row.description, row.title, row.current_revision) == ("new", "X", 2)
    assert (row.alias, row.tags, row.admin_notes, row.gated, row.effect) == (
        "My X",
        ["crm"],
        "keep",
        False,
        "read",
    )
    numbers = list(row.revisions.values_list("number", flat=True))
    assert numbers == [1, 2]
    (item,) = result.report["items"]
    assert item["change"] == "updated"
    assert item["changed_fields"] == ["description", "title"]
    assert item["before"] == {"description": "old", "title": None}


def test_hints_never_move_effect_or_ungate_without_apply_effect(gateway, fake_probe):
    fake_probe.set_tools([tool("x")])
    run(gateway, apply=True)
    fake_probe.set_tools([tool("x", "v2", annotations={"readOnlyHint": True})])
    run(gateway, apply=True)
    row = Tool.objects.get(name="x")
    assert (row.effect, row.gated) == ("write", True)
    fake_probe.set_tools([tool("x", "v3", annotations={"readOnlyHint": True})])
    result = run(gateway, apply=True, apply_effect=True)
    row.refresh_from_db()
    assert row.effect == "read"
    assert row.gated is True, "a hint never switches the safety gate off"
    assert result.report["summary"]["effect_changed"] == 1


def test_deactivate_missing_only_with_the_flag_and_never_deletes(gateway, fake_probe):
    fake_probe.set_tools([tool("a"), tool("b")])
    run(gateway, apply=True)
    fake_probe.set_tools([tool("a")])
    kept = run(gateway, apply=True)
    assert Tool.objects.get(name="b").active
    assert "kept active because deactivate_missing was off" in kept.report["note"]
    gone = run(gateway, apply=True, deactivate_missing=True)
    b = Tool.objects.get(name="b")
    assert not b.active and b.deactivated_at and b.deactivated_reason
    assert gone.report["summary"]["deactivated"] == 1
    assert Tool.objects.count() == 2 and ToolRevision.objects.count() == 2


def test_incomplete_catalog_never_deactivates(gateway, fake_probe):
    fake_probe.set_tools([tool("a"), tool("b"), tool("c")])
    run(gateway, apply=True)
    fake_probe.set_tools([tool("a")], complete=False, reason="page 2 failed: HTTP 500")
    result = run(gateway, apply=True, deactivate_missing=True)
    assert result.status == "succeeded" and result.complete is False
    assert Tool.objects.filter(active=True).count() == 3
    assert result.report["complete"] is False
    assert result.report["incomplete_reason"] == "page 2 failed: HTTP 500"
    assert result.report["summary"]["disappeared"] == 0
    assert result.report["summary"]["unseen"] == 2
    assert "nothing was treated as disappeared" in result.report["note"]


def test_returning_is_reactivated_only_with_the_flag(gateway, fake_probe):
    fake_probe.set_tools([tool("a"), tool("b")])
    run(gateway, apply=True)
    fake_probe.set_tools([tool("a")])
    run(gateway, apply=True, deactivate_missing=True)
    fake_probe.set_tools([tool("a"), tool("b", "changed while away")])
    left = run(gateway, apply=True)
    assert not Tool.objects.get(name="b").active
    assert left.report["items"][1]["action"] == "leave_inactive"
    back = run(gateway, apply=True, reactivate_returning=True)
    b = Tool.objects.get(name="b")
    assert (
        b.active and b.deactivated_at is None and b.description == "changed while away"
    )
    assert b.current_revision == 2
    assert back.report["summary"]["reactivated"] == 1


def test_skipped_entry_leaves_the_existing_tool_exactly_as_it_is(gateway, fake_probe):
    fake_probe.set_tools([tool("a"), tool("b")])
    run(gateway, apply=True)
    before = catalog_state()
    fake_probe.set_tools([tool("a"), {"name": "b", "inputSchema": {"type": "string"}}])
    result = run(gateway, apply=True, deactivate_missing=True)
    assert catalog_state() == before
    assert result.report["skipped"] == [
        {
            "name": "b",
            "reason": 'inputSchema is not an object schema (root "type" must be "object")',
        }
    ]


def test_definition_pinning(gateway, fake_probe, django_user_model):
    admin = django_user_model.objects.create(username="boss")
    fake_probe.set_tools([tool("x", "v1")])
    run(gateway, apply=True)
    row = Tool.objects.get(name="x")
    tool_approve(tool=row, user=admin)
    row.refresh_from_db()
    assert row.review_state == "approved" and row.approved_revision.number == 1
    fake_probe.set_tools([tool("x", "v2")])
    result = run(gateway, apply=True)
    row.refresh_from_db()
    assert row.review_state == "changed"
    assert row.approved_revision.number == 1, "a refresh never approves anything"
    assert result.report["items"][0]["requires_review"] is True
    assert "need re-approval" in result.report["note"]
    tool_approve(tool=row, user=admin)
    row.refresh_from_db()
    assert row.review_state == "approved" and row.approved_revision.number == 2


def test_unchanged_catalog_writes_nothing(gateway, fake_probe):
    fake_probe.set_tools([tool(f"t{i}") for i in range(20)])
    run(gateway, apply=True)
    before = catalog_state()
    with CaptureQueriesContext(connection) as queries:
        result = run(gateway, apply=True)
    assert catalog_state() == before
    writes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith(("INSERT", "UPDATE", "DELETE")) and "tools_" in q["sql"]
    ]
    assert writes == []
    assert result.report["summary"]["unchanged"] == 20


def _noop_query_count(gateway, fake_probe, n):
    fake_probe.set_tools([tool(f"t{i}", f"description {i}") for i in range(n)])
    run(gateway, apply=True)
    with CaptureQueriesContext(connection) as queries:
        run(gateway, apply=True)
    return len(queries.captured_queries)


def test_noop_query_count_is_the_same_at_100_and_10000_tools(tenant, fake_probe):
    from tests.factories import GatewayFactory

    small = _noop_query_count(GatewayFactory(tenant=tenant), fake_probe, 100)
    large = _noop_query_count(GatewayFactory(tenant=tenant), fake_probe, 10_000)
    assert small == large


def test_change_refresh_query_count_does_not_grow_per_tool(tenant, fake_probe):
    from tests.factories import GatewayFactory

    counts = []
    for n in (100, 1000):
        gateway = GatewayFactory(tenant=tenant)
        fake_probe.set_tools([tool(f"t{i}") for i in range(n)])
        run(gateway, apply=True)
        changed = [
            tool(f"t{i}", "new" if i % 10 == 0 else "d") for i in range(n - n // 20)
        ]
        changed += [tool(f"extra{i}") for i in range(n // 20)]
        fake_probe.set_tools(changed)
        with CaptureQueriesContext(connection) as queries:
            run(gateway, apply=True, deactivate_missing=True)
        counts.append(len(queries.captured_queries))
    # Bulk writes in batches of 1,000: a handful more statements, not one per tool.
    assert counts[1] - counts[0] <= 4, counts


def test_exception_midway_through_apply_leaves_the_database_as_before(
    gateway, fake_probe, monkeypatch
):
    fake_probe.set_tools([tool("a"), tool("b")])
    run(gateway, apply=True)
    before = catalog_state()
    fake_probe.set_tools([tool("a", "changed"), tool("c")])

    def explode(*args, **kwargs):
        raise RuntimeError("disk on fire")

    # New tools are already inserted when existing ones are updated.
    with monkeypatch.context() as patch, pytest.raises(RefreshError) as err:
        patch.setattr("tools.services._update_tool_specs", explode)
        run(gateway, apply=True, deactivate_missing=True)
    assert err.value.code == "refresh_failed" and err.value.run_id
    result = RefreshRun.objects.get(pk=err.value.run_id)
    assert result.status == "failed" and result.error_code == "apply_failed"
    assert "rolled back" in result.reason and "disk on fire" in result.reason
    assert catalog_state() == before
    gateway.refresh_from_db()
    assert gateway.lease_token is None
    assert run(gateway, apply=True).status == "succeeded"


def test_stale_preview_fingerprint_is_not_applied(gateway, fake_probe):
    fake_probe.set_tools([tool("a")])
    preview = run(gateway)
    fake_probe.set_tools([tool("a"), tool("b")])
    result = run(gateway, apply=True, expected_fingerprint=preview.catalog_fingerprint)
    assert result.applied is False and result.report["stale_preview"] is True
    assert Tool.objects.count() == 0
    assert "changed since the preview" in result.report["note"]
    same = run(gateway, apply=True, expected_fingerprint=result.catalog_fingerprint)
    assert same.applied is True and Tool.objects.count() == 2


def test_prompts_and_resources_are_refreshed_when_included(gateway, fake_probe):
    from tools.models import Prompt, Resource

    fake_probe.set_tools(
        [tool("a")],
        prompts=[{"name": "p1"}, {"name": "p2", "description": "x"}],
        resources=[{"uri": "file:///r", "name": "r"}],
    )
    result = run(gateway, apply=True, include_prompts=True, include_resources=True)
    assert Prompt.objects.count() == 2 and Resource.objects.count() == 1
    assert result.report["prompts"]["summary"]["added"] == 2
    assert result.report["resources"]["summary"]["added"] == 1
    fake_probe.set_tools([tool("a")], prompts=[{"name": "p1"}], resources=[])
    run(
        gateway,
        apply=True,
        include_prompts=True,
        include_resources=True,
        deactivate_missing=True,
    )
    assert not Prompt.objects.get(name="p2").active
    assert not Resource.objects.get(uri="file:///r").active


def test_report_shape(gateway, fake_probe):
    fake_probe.set_tools([tool("a")])
    report = run(gateway, apply=True).report
    for key in (
        "prefix",
        "source",
        "applied",
        "complete",
        "items",
        "skipped",
        "summary",
        "note",
        "run_id",
        "gateway_id",
        "trigger",
        "duration_ms",
    ):
        assert key in report, key
    assert set(report["summary"]) >= {
        "added",
        "updated",
        "unchanged",
        "returning",
        "disappeared",
        "skipped",
        "deactivated",
        "reactivated",
    }
    item = report["items"][0]
    assert set(item) >= {
        "name",
        "change",
        "changed_fields",
        "before",
        "after",
        "effect_hint",
        "effect",
        "action",
        "referenced_by",
    }
    assert report["prefix"] == gateway.prefix and report["source"] == gateway.url
