"""Tools over the API: the catalog's read shape, filters, pagination without N+1,
local edits that refreshes keep, approval that pins a revision, history."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tests import factories
from tests.api.conftest import error_of, field_errors
from tools.models import Tool

pytestmark = pytest.mark.django_db

LIST = "/api/tools/"

SPEC_FIELDS = {
    "id",
    "gateway",
    "name",
    "qualified_name",
    "title",
    "description",
    "input_schema",
    "output_schema",
    "annotations",
    "icons",
    "execution",
    "meta",
    "effect",
    "gated",
    "active",
    "review_state",
    "revision",
    "spec_hash",
}


def detail(tool: Tool) -> str:
    return f"{LIST}{tool.pk}/"


def apply_catalog(gateway, fake_probe, tools) -> RefreshRun:
    fake_probe.set_tools(tools)
    return refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.API,
        options=RefreshOptions(apply=True, deactivate_missing=True),
    )


def test_read_shape_keeps_mcp_keys_inside_json_values(world, fake_probe):
    apply_catalog(
        world.gateway,
        fake_probe,
        [
            {
                "name": "search_contacts",
                "title": "Search",
                "description": "Find contacts.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"q": {"type": "string"}},
                    "additionalProperties": False,
                },
                "outputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": True, "openWorldHint": False},
                "_meta": {"vendor/x": 1},
            },
            {"name": "create_invoice", "inputSchema": {"type": "object"}},
        ],
    )
    tool = Tool.objects.get(gateway=world.gateway, name="search_contacts")
    body = world.client("viewer").get(detail(tool)).json()
    assert SPEC_FIELDS <= set(body)
    assert body["qualified_name"] == "crm__search_contacts"
    assert body["gateway"] == world.gateway.pk
    assert body["input_schema"]["additionalProperties"] is False
    assert body["annotations"] == {"readOnlyHint": True, "openWorldHint": False}
    assert body["meta"] == {"vendor/x": 1}
    assert body["revision"] == 2 and body["spec_hash"] == tool.spec_hash
    # The server hinted read-only; a refresh never acts on a hint by itself.
    assert (body["effect"], body["gated"], body["review_state"]) == (
        "write",
        True,
        "pending",
    )
    assert body["transport"] == "streamable_http" and body["approved_revision"] is None


def test_filters(world):
    factories.ToolFactory(
        gateway=world.gateway,
        name="old_export",
        active=False,
        deactivated_at="2026-01-01T00:00:00Z",
    )
    client = world.client("viewer")

    def names(**params) -> list[str]:
        response = client.get(LIST, params)
        assert response.status_code == 200, response.content
        return [t["name"] for t in response.json()["results"]]

    assert names(gateway=world.gateway.pk) == [
        "create_invoice",
        "old_export",
        "search_contacts",
    ]
    assert names(active="false") == ["old_export"]
    assert names(name="create_invoice") == ["create_invoice"]
    assert names(review_state="approved") == []
    # Another tenant's gateway id answers exactly like an id that does not exist.
    assert names(gateway=world.rival_gateway.pk) == []
    assert names(gateway=999_999) == []
    for bad in ({"review_state": "maybe"}, {"active": "perhaps"}, {"gateway": "x"}):
        response = client.get(LIST, bad)
        assert response.status_code == 422, bad
        assert error_of(response)["details"]["errors"][0]["field"] == next(iter(bad))


def test_page_of_1000_costs_the_same_queries_as_a_page_of_3(world):
    client = world.client("viewer")

    def page_queries() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(LIST, {"page_size": 1000})
        assert response.status_code == 200
        return len(response.json()["results"]), len(queries)

    few, few_queries = page_queries()
    Tool.objects.bulk_create(
        Tool(
            gateway=world.gateway,
            name=f"bulk_{i:04d}",
            input_schema={"type": "object"},
            spec_hash="0" * 64,
        )
        for i in range(1200)
    )
    many, many_queries = page_queries()
    assert (few, many) == (2, 1000)
    assert many_queries == few_queries, "a page's query count grows with its rows"
    body = client.get(LIST, {"page_size": 5000}).json()
    assert len(body["results"]) == 1000  # page_size is capped at 1000


def test_patch_changes_local_fields_and_a_refresh_keeps_them(world, fake_probe):
    tool = world.tools[0]
    response = world.client("member").patch(
        detail(tool),
        {
            "alias": "Find someone",
            "tags": ["crm", "search"],
            "effect": "read",
            "gated": False,
            "visibility": "hidden",
            "admin_notes": "Checked with legal.\nSafe.",
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["alias"], body["tags"], body["effect"], body["gated"]) == (
        "Find someone",
        ["crm", "search"],
        "read",
        False,
    )
    # A refresh that changes the server-owned spec leaves local fields alone.
    apply_catalog(
        world.gateway,
        fake_probe,
        [
            {
                "name": "search_contacts",
                "description": "Now different.",
                "inputSchema": {"type": "object"},
            },
            {"name": "create_invoice", "inputSchema": {"type": "object"}},
        ],
    )
    body = world.client("viewer").get(detail(tool)).json()
    assert body["description"] == "Now different."
    assert (body["alias"], body["effect"], body["gated"], body["visibility"]) == (
        "Find someone",
        "read",
        False,
        "hidden",
    )


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"description": "hijacked"}, {"description": "unknown_field"}),
        ({"input_schema": {}}, {"input_schema": "unknown_field"}),
        ({"name": "renamed"}, {"name": "unknown_field"}),
        ({"review_state": "approved"}, {"review_state": "unknown_field"}),
        ({"active": False}, {"active": "unknown_field"}),
        ({}, {"non_field_errors": "empty"}),
        ({"effect": "delete"}, {"effect": "invalid_choice"}),
        ({"tags": "crm"}, {"tags": "not_a_list"}),
        ({"tags": ["x" * 65]}, {"tags.0": "max_length"}),
        ({"alias": "a\x07b"}, {"alias": "control_characters"}),
        ({"gated": "nope"}, {"gated": "invalid"}),
    ],
)
def test_patch_refuses_anything_but_valid_local_fields(world, body, errors):
    tool = world.tools[0]
    before = world.client("viewer").get(detail(tool)).json()
    response = world.client("member").patch(detail(tool), body, format="json")
    assert field_errors(response) == errors
    assert world.client("viewer").get(detail(tool)).json() == before


def test_approve_pins_the_current_revision_until_a_refresh_changes_it(
    world, fake_probe
):
    tool, admin = world.tools[0], world.client("admin")
    approve = f"{LIST}{tool.pk}/approve"
    response = admin.post(approve, {}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["review_state"] == "approved"
    assert response.json()["approved_revision"] == 1

    # The server changes the definition: the new revision needs review.
    run = apply_catalog(
        world.gateway,
        fake_probe,
        [
            {
                "name": "search_contacts",
                "description": "Exports everything.",
                "inputSchema": {"type": "object"},
            },
            {"name": "create_invoice", "inputSchema": {"type": "object"}},
        ],
    )
    item = next(i for i in run.report["items"] if i["name"] == "search_contacts")
    assert item["requires_review"] is True
    body = world.client("viewer").get(detail(tool)).json()
    assert (body["review_state"], body["revision"], body["approved_revision"]) == (
        "changed",
        2,
        1,
    )

    # Approving the revision one reviewed, after the tool moved on, approves nothing.
    response = admin.post(approve, {"revision": 1}, format="json")
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "revision_mismatch"
    assert error["details"] == {"revision": 2, "requested": 1}
    assert Tool.objects.get(pk=tool.pk).review_state == "changed"

    response = admin.post(approve, {"revision": 2}, format="json")
    assert response.json()["review_state"] == "approved"
    assert response.json()["approved_revision"] == 2
    stored = Tool.objects.get(pk=tool.pk)
    assert stored.approved_by == world.users["admin"]
    assert stored.approved_revision.number == 2


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"revision": 0}, {"revision": "min_value"}),
        ({"revision": "two"}, {"revision": "invalid"}),
        ({"revision": 1, "force": True}, {"force": "unknown_field"}),
    ],
)
def test_approve_validates_its_body(world, body, errors):
    response = world.client("admin").post(
        f"{LIST}{world.tools[0].pk}/approve", body, format="json"
    )
    assert field_errors(response) == errors
    assert Tool.objects.get(pk=world.tools[0].pk).review_state == "pending"


def test_revisions_newest_first_with_the_runs_that_wrote_them(world, fake_probe):
    tool = world.tools[0]
    runs = [
        apply_catalog(
            world.gateway,
            fake_probe,
            [
                {
                    "name": "search_contacts",
                    "description": f"Version {n}.",
                    "inputSchema": {"type": "object"},
                },
                {"name": "create_invoice", "inputSchema": {"type": "object"}},
            ],
        )
        for n in (2, 3)
    ]
    body = world.client("viewer").get(f"{LIST}{tool.pk}/revisions/").json()
    assert body["count"] == 3
    numbers = [r["number"] for r in body["results"]]
    assert numbers == [3, 2, 1]
    newest = body["results"][0]
    assert newest["spec"]["description"] == "Version 3."
    assert newest["changed_fields"] == ["description"]
    assert newest["refresh_run"] == runs[1].pk


def test_another_tenants_tool_is_404_everywhere(world):
    client = world.client("owner")
    theirs = world.rival_tool
    for method, path, body in (
        ("get", detail(theirs), None),
        ("get", f"{LIST}{theirs.pk}/revisions/", None),
        ("patch", detail(theirs), {"alias": "x"}),
        ("post", f"{LIST}{theirs.pk}/approve", {}),
    ):
        response = getattr(client, method)(path, body, format="json")
        assert response.status_code == 404, (method, path)
        assert error_of(response)["code"] == "not_found"
    # Same answer as an id that does not exist at all.
    missing = client.get(f"{LIST}999999/")
    assert missing.json() == client.get(detail(theirs)).json()
    theirs.refresh_from_db()
    assert theirs.alias == "" and theirs.review_state == "pending"


def run_together(*calls: Any) -> list[int]:
    """Start each call in its own thread at the same moment; their statuses."""
    barrier = threading.Barrier(len(calls))
    statuses: list[int] = [0] * len(calls)

    def run(index: int) -> None:
        try:
            barrier.wait()
            statuses[index] = calls[index]().status_code
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return statuses


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_approve_racing_an_apply_never_approves_an_unseen_revision(world, fake_probe):
    """Approve (admin) and an applying refresh that changes the tool, started
    together, 8 times: the tool ends approved at its current revision, or
    `changed` with the approval pinned to the older one; never approved at a
    revision older than its current one."""
    tool = world.tools[0]
    admin, member = world.client("admin"), world.client("member")
    for round_no in range(8):
        fake_probe.set_tools(
            [
                {
                    "name": "search_contacts",
                    "description": f"Round {round_no}.",
                    "inputSchema": {"type": "object"},
                },
                {"name": "create_invoice", "inputSchema": {"type": "object"}},
            ]
        )
        statuses = run_together(
            lambda: admin.post(f"{LIST}{tool.pk}/approve", {}, format="json"),
            lambda: member.post(
                f"/api/gateways/{world.gateway.pk}/tools/refresh",
                {"apply": True},
                format="json",
            ),
        )
        assert statuses == [200, 200]
        stored = Tool.objects.select_related("approved_revision").get(pk=tool.pk)
        assert stored.current_revision == round_no + 2
        if stored.review_state == "approved":
            assert stored.approved_revision.number == stored.current_revision
        else:
            assert stored.review_state == "changed"
            assert stored.approved_revision.number == stored.current_revision - 1
