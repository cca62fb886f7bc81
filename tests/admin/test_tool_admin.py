"""The tool admin: filters, revisions inline, a diff between any two revisions, Approve.

Revisions are written by real refreshes of a real MCP test server, so the
diff and review pages are exercised on what the engine really stores.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tests import factories
from tests.admin.conftest import PAGE_STATUS, ROLES
from tools.models import Tool
from tools.services import tool_approve

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:tools_tool_changelist"


def apply(gateway: Any) -> RefreshRun:
    return refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.CLI,
        options=RefreshOptions(apply=True),
    )


def edit_tool(server: Any, name: str, **fields: Any) -> None:
    tools = copy.deepcopy(server.snapshot()["tools"])
    for tool in tools:
        if tool["name"] == name:
            tool.update(fields)
    server.set_tools(tools)


@pytest.fixture
def three_revisions(served_gateway: Any) -> tuple[Tool, Any]:
    """A tool whose server changed it twice: revisions 1, 2 and 3."""
    gateway, server = served_gateway(tools=2)
    name = sorted(server.state()["names"])[0]
    edit_tool(server, name, description="Second wording.")
    apply(gateway)
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    edit_tool(server, name, description="Third wording.", inputSchema=schema)
    apply(gateway)
    tool = Tool.objects.get(gateway=gateway, name=name)
    assert tool.current_revision == 3
    return tool, server


def diff_url(tool: Tool, a: Any = None, b: Any = None) -> str:
    url = reverse("admin:tools_tool_diff", args=[tool.pk])
    query = "&".join(f"{k}={v}" for k, v in (("a", a), ("b", b)) if v is not None)
    return f"{url}?{query}" if query else url


def changelist_names(client: Client, query: str = "") -> set[str]:
    response = client.get(reverse(CHANGELIST) + query)
    assert response.status_code == 200
    return {t.name for t in response.context["cl"].result_list}


# -- list and filters ----------------------------------------------------------------------


def test_filters_by_gateway_review_state_active_and_effect(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    one = factories.GatewayFactory(tenant=tenant, prefix="one")
    two = factories.GatewayFactory(tenant=tenant, prefix="two")
    factories.ToolFactory(gateway=one, name="pending_write")
    factories.ToolFactory(
        gateway=one, name="approved_read", effect="read", review_state="approved"
    )
    factories.ToolFactory(
        gateway=two, name="gone", active=False, deactivated_at=timezone.now()
    )
    factories.ToolFactory(gateway=two, name="changed_one", review_state="changed")
    client.force_login(people["admin"])

    page = client.get(reverse(CHANGELIST))
    titles = [f.title for f in page.context["cl"].filter_specs]
    assert titles[:4] == ["gateway", "review state", "active", "effect"]
    assert changelist_names(client, f"?gateway__id__exact={one.pk}") == {
        "pending_write",
        "approved_read",
    }
    assert changelist_names(client, "?review_state__exact=changed") == {"changed_one"}
    assert changelist_names(client, "?review_state__exact=pending") == {
        "pending_write",
        "gone",
    }
    assert changelist_names(client, "?active__exact=0") == {"gone"}
    assert changelist_names(client, "?effect__exact=read") == {"approved_read"}
    row = page.content.decode()
    assert "Changed since approval" in row and 'class="ts-badge ts-bad"' in row


def test_a_tenant_admin_lists_only_their_tenants_tools(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    mine = factories.GatewayFactory(tenant=tenant)
    theirs = factories.GatewayFactory(
        tenant=people["outsider"].memberships.get().tenant
    )
    factories.ToolFactory(gateway=mine, name="mine")
    factories.ToolFactory(gateway=theirs, name="theirs")
    client.force_login(people["admin"])
    assert changelist_names(client) == {"mine"}
    # Filtering by another tenant's gateway shows nothing of theirs.
    assert changelist_names(client, f"?gateway__id__exact={theirs.pk}") == set()


# -- the tool page ----------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_tool_page_by_role(
    role: str, people: dict[str, Any], client: Client, tenant: Any
) -> None:
    tool = factories.ToolFactory(gateway=factories.GatewayFactory(tenant=tenant))
    client.force_login(people[role])
    url = reverse("admin:tools_tool_change", args=[tool.pk])
    assert client.get(url).status_code == PAGE_STATUS[role]
    assert client.get(diff_url(tool, 1, 1)).status_code == PAGE_STATUS[role]


def test_tool_page_shows_revisions_inline_newest_first(
    people: dict[str, Any], client: Client, three_revisions: tuple[Tool, Any]
) -> None:
    tool, _server = three_revisions
    client.force_login(people["admin"])
    page = client.get(reverse("admin:tools_tool_change", args=[tool.pk]))
    inline = page.context["inline_admin_formsets"][0]
    assert [f.original.number for f in inline] == [3, 2, 1]
    html = page.content.decode()
    assert f'{diff_url(tool)}?a=2&amp;b=3">compare with #2' in html
    assert f'{diff_url(tool)}?a=1&amp;b=2">compare with #1' in html
    runs = list(tool.revisions.order_by("number").values_list("refresh_run", flat=True))
    for run_id in runs:
        assert reverse("admin:refresh_refreshrun_change", args=[run_id]) in html


def test_saving_the_tool_form_writes_only_locally_owned_fields(
    people: dict[str, Any], client: Client, three_revisions: tuple[Tool, Any]
) -> None:
    tool, _server = three_revisions
    client.force_login(people["admin"])
    url = reverse("admin:tools_tool_change", args=[tool.pk])
    response = client.post(
        url,
        {
            "effect": "read",
            "visibility": "visible",
            "alias": "finder",
            "tags": '["search"]',
            "jsonpath_filter": "",
            "admin_notes": "Checked by hand.",
            # Server-owned and review fields are not form fields: ignored.
            "description": "Hijacked.",
            "review_state": "approved",
            "revisions-TOTAL_FORMS": "0",
            "revisions-INITIAL_FORMS": "3",
            "revisions-MIN_NUM_FORMS": "0",
            "revisions-MAX_NUM_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    after = Tool.objects.get(pk=tool.pk)
    assert (after.effect, after.gated, after.alias, after.tags) == (
        "read",
        False,  # an unchecked box
        "finder",
        ["search"],
    )
    assert after.description == tool.description == "Third wording."
    assert after.review_state == tool.review_state
    assert after.revisions.count() == 3


# -- diff between any two revisions ------------------------------------------------------------


@pytest.mark.parametrize(("a", "b"), [(1, 3), (3, 1), (1, 2), (2, 3), (2, 2)])
def test_diff_between_any_two_revisions(
    a: int,
    b: int,
    people: dict[str, Any],
    client: Client,
    three_revisions: tuple[Tool, Any],
) -> None:
    tool, _server = three_revisions
    specs = {r.number: r.spec for r in tool.revisions.all()}
    client.force_login(people["admin"])

    page = client.get(diff_url(tool, a, b))

    assert page.status_code == 200
    assert (page.context["left"].number, page.context["right"].number) == (a, b)
    changed = {f.name for f in page.context["fields"] if f.changed}
    expected = {
        {"description": "description", "inputSchema": "input_schema"}[key]
        for key in set(specs[a]) | set(specs[b])
        if key in ("description", "inputSchema")
        and specs[a].get(key) != specs[b].get(key)
    }
    assert changed == expected
    html = page.content.decode()
    if "description" in changed:
        assert f"<del>{specs[a]['description'].split()[0]}</del>" in html
        assert f"<ins>{specs[b]['description'].split()[0]}</ins>" in html
    if "input_schema" in changed:
        assert 'class="ts-row-' in html and "$.properties.q.type" in html
    assert f"revision {a} → {b}" in page.context["title"]


@pytest.mark.parametrize("query", ["a=9&b=1", "a=1&b=0", "a=-1&b=2"])
def test_diff_of_a_revision_that_does_not_exist_is_404(
    query: str,
    people: dict[str, Any],
    client: Client,
    three_revisions: tuple[Tool, Any],
) -> None:
    tool, _server = three_revisions
    client.force_login(people["admin"])
    url = reverse("admin:tools_tool_diff", args=[tool.pk]) + "?" + query
    response = client.get(url)
    if query == "a=-1&b=2":  # not a number: the default (the approved or previous)
        assert response.status_code == 200
        assert response.context["left"].number == 1
    else:
        assert response.status_code == 404


def test_diff_defaults_to_the_approved_revision_against_the_current(
    people: dict[str, Any], client: Client, three_revisions: tuple[Tool, Any]
) -> None:
    tool, _server = three_revisions
    tool.approved_revision = tool.revisions.get(number=1)
    tool.review_state = "changed"
    tool.save(update_fields=["approved_revision", "review_state"])
    client.force_login(people["admin"])
    page = client.get(diff_url(tool))
    assert (page.context["left"].number, page.context["right"].number) == (1, 3)
    assert b'id="ts-approve-form"' in page.content


# -- approve -------------------------------------------------------------------------------------


def test_approve_button_approves_the_revision_shown(
    people: dict[str, Any], client: Client, three_revisions: tuple[Tool, Any]
) -> None:
    tool, _server = three_revisions
    client.force_login(people["admin"])
    url = reverse("admin:tools_tool_change", args=[tool.pk])
    page = client.get(url)
    assert tool.review_state == "pending"
    assert b'id="ts-approve"' in page.content
    assert b'name="revision" value="3"' in page.content

    done = client.post(
        reverse("admin:tools_tool_approve", args=[tool.pk]),
        {"revision": "3"},
        follow=True,
    )

    tool.refresh_from_db()
    assert (tool.review_state, tool.approved_revision.number) == ("approved", 3)
    assert tool.approved_by == people["admin"]
    assert [str(m) for m in done.context["messages"]] == [
        f"Approved revision 3 of {tool.name}."
    ]
    assert b'id="ts-approve"' not in client.get(url).content


def test_a_changed_tool_is_approved_again_after_review(
    people: dict[str, Any], client: Client, served_gateway: Any
) -> None:
    gateway, server = served_gateway(tools=2)
    name = sorted(server.state()["names"])[0]
    tool = Tool.objects.get(gateway=gateway, name=name)
    tool_approve(tool=tool, user=people["admin"])
    edit_tool(server, name, description="Now deletes as well.")
    apply(gateway)
    tool.refresh_from_db()
    assert (tool.review_state, tool.current_revision) == ("changed", 2)
    client.force_login(people["owner"])

    page = client.get(reverse("admin:tools_tool_change", args=[tool.pk]))
    html = page.content.decode()
    assert 'id="ts-since-approval"' in html and "<ins>" in html
    assert f"{diff_url(tool)}?a=1&amp;b=2" in html
    client.post(reverse("admin:tools_tool_approve", args=[tool.pk]), {"revision": "2"})

    tool.refresh_from_db()
    assert (tool.review_state, tool.approved_revision.number) == ("approved", 2)


def test_approve_refuses_a_revision_that_is_no_longer_current(
    people: dict[str, Any], client: Client, three_revisions: tuple[Tool, Any]
) -> None:
    tool, _server = three_revisions
    client.force_login(people["admin"])
    page = client.post(
        reverse("admin:tools_tool_approve", args=[tool.pk]),
        {"revision": "2"},
        follow=True,
    )
    [message] = [str(m) for m in page.context["messages"]]
    assert "revision 3 is current now" in message
    tool.refresh_from_db()
    assert tool.review_state == "pending" and tool.approved_revision is None


@pytest.mark.parametrize("role", [*ROLES, "no_change_perm"])
def test_approve_by_role(
    role: str, people: dict[str, Any], make_staff: Any, client: Client, tenant: Any
) -> None:
    tool = factories.ToolFactory(gateway=factories.GatewayFactory(tenant=tenant))
    if role == "no_change_perm":
        user = make_staff(tenant=tenant, role="admin", perms=["tools.view_tool"])
        expected = 403
    else:
        user = people[role]
        expected = 302 if PAGE_STATUS[role] == 200 else PAGE_STATUS[role]
    client.force_login(user)
    url = reverse("admin:tools_tool_approve", args=[tool.pk])

    assert client.get(url).status_code in (405, 404, 403)  # never over GET
    response = client.post(url, {"revision": "1"})

    assert response.status_code == expected
    tool.refresh_from_db()
    assert (tool.review_state == "approved") == (expected == 302)
    if role == "no_change_perm":
        page = client.get(reverse("admin:tools_tool_change", args=[tool.pk]))
        assert b'id="ts-approve"' not in page.content


def test_approve_over_get_is_refused(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    tool = factories.ToolFactory(gateway=factories.GatewayFactory(tenant=tenant))
    client.force_login(people["superuser"])
    assert (
        client.get(reverse("admin:tools_tool_approve", args=[tool.pk])).status_code
        == 405
    )
    tool.refresh_from_db()
    assert tool.review_state == "pending"


def test_approve_action_approves_pending_and_changed_and_reports_how_many(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    gateway = factories.GatewayFactory(tenant=tenant)
    pending = factories.ToolFactory(gateway=gateway, name="p")
    changed = factories.ToolFactory(gateway=gateway, name="c", current_revision=2)
    Tool.objects.filter(pk=changed.pk).update(
        review_state="changed", approved_revision=changed.revisions.get(number=1)
    )
    approved = factories.ToolFactory(gateway=gateway, name="a")
    tool_approve(tool=approved, user=people["admin"])
    theirs = factories.ToolFactory(
        gateway=factories.GatewayFactory(
            tenant=people["outsider"].memberships.get().tenant
        )
    )
    client.force_login(people["admin"])

    page = client.post(
        reverse(CHANGELIST),
        {
            "action": "approve_selected",
            "_selected_action": [pending.pk, changed.pk, approved.pk, theirs.pk],
        },
        follow=True,
    )

    assert [str(m) for m in page.context["messages"]] == [
        "Approved 2 tools; 1 already approved, left as they were."
    ]
    states = dict(Tool.objects.values_list("name", "review_state"))
    assert (states["p"], states["c"], states["a"]) == (
        "approved",
        "approved",
        "approved",
    )
    assert Tool.objects.get(pk=theirs.pk).review_state == "pending"
    assert Tool.objects.get(pk=changed.pk).approved_revision.number == 2


def test_no_approve_action_without_the_permission(
    make_staff: Any, client: Client, tenant: Any
) -> None:
    tool = factories.ToolFactory(gateway=factories.GatewayFactory(tenant=tenant))
    user = make_staff(tenant=tenant, role="admin", perms=["tools.view_tool"])
    client.force_login(user)
    page = client.get(reverse(CHANGELIST))
    assert "approve_selected" not in page.content.decode()
    client.post(
        reverse(CHANGELIST),
        {"action": "approve_selected", "_selected_action": [tool.pk]},
    )
    tool.refresh_from_db()
    assert tool.review_state == "pending"


def test_tool_list_queries_do_not_grow_with_tools(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    gateway = factories.GatewayFactory(tenant=tenant)
    for n in range(3):
        factories.ToolFactory(gateway=gateway, name=f"first_{n}")
    client.force_login(people["admin"])
    client.get(reverse(CHANGELIST))

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse(CHANGELIST)).status_code == 200
        return len(ctx.captured_queries)

    few = queries()
    other = factories.GatewayFactory(tenant=tenant)
    for n in range(30):
        factories.ToolFactory(gateway=other, name=f"more_{n}")
    assert queries() == few


@pytest.mark.parametrize("revision", [None, "", "two", "-1", "2; DROP TABLE"])
def test_approve_without_a_clear_revision_approves_nothing(
    revision: str | None, people: dict[str, Any], client: Client, tenant: Any
) -> None:
    tool = factories.ToolFactory(gateway=factories.GatewayFactory(tenant=tenant))
    client.force_login(people["admin"])
    data = {} if revision is None else {"revision": revision}
    page = client.post(
        reverse("admin:tools_tool_approve", args=[tool.pk]), data, follow=True
    )
    assert [str(m) for m in page.context["messages"]] == [
        "Not approved: the request did not say which revision."
    ]
    tool.refresh_from_db()
    assert tool.review_state == "pending" and tool.approved_revision is None
