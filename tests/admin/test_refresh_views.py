"""The admin's Refresh -> preview -> Apply pages, through the test client.

Real MCP test servers over Streamable HTTP and the real engine; only the
browser is left out (tests/admin/test_browser.py has it). Covers every
permission case, no refresh or apply over GET or without CSRF, what the
preview shows, and Apply writing exactly the catalog the preview showed.
"""

from __future__ import annotations

import copy
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from gateways.models import Gateway
from gateways.services import gateway_create
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from skills.services import skill_create
from tests import factories
from tests.admin.conftest import PAGE_STATUS, ROLES
from tools.models import Prompt, Resource, Tool, ToolRevision

pytestmark = pytest.mark.django_db

REFRESHERS = ("superuser", "owner", "admin")


def start_url(gateway: Gateway) -> str:
    return reverse("admin:gateways_gateway_refresh", args=[gateway.pk])


def apply_url(gateway: Gateway) -> str:
    return reverse("admin:gateways_gateway_refresh_apply", args=[gateway.pk])


def preview_url(gateway: Gateway, run: RefreshRun) -> str:
    return reverse("admin:gateways_gateway_refresh_preview", args=[gateway.pk, run.pk])


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def latest_run(gateway: Gateway) -> RefreshRun:
    return RefreshRun.objects.filter(gateway=gateway).latest("pk")


def catalog_state(gateway: Gateway) -> list[tuple[Any, ...]]:
    """Everything a refresh may write, to prove that nothing was."""
    return list(
        Tool.objects.filter(gateway=gateway)
        .order_by("name")
        .values_list("name", "spec_hash", "active", "effect", "review_state")
    ) + [ToolRevision.objects.filter(tool__gateway=gateway).count()]


def server_tools(server: Any) -> list[dict[str, Any]]:
    return copy.deepcopy(server.snapshot()["tools"])


def dry_run(gateway: Gateway, **options: bool) -> RefreshRun:
    """A preview made by the engine itself (as the admin's Refresh makes one)."""
    return refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.ADMIN,
        options=RefreshOptions(**options),
    )


def apply_form(run: RefreshRun, **options: bool) -> dict[str, str]:
    data = {"preview_run": str(run.pk), "_apply": "Apply"}
    data.update({name: "on" for name, on in options.items() if on})
    return data


# -- who may refresh, preview and apply ------------------------------------------------


@pytest.mark.parametrize("role", [*ROLES, "no_refresh_perm"])
def test_refresh_button_post_by_role(
    role: str, people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=4)
    server.mutate(change=0.5, add=0.0, remove=0.0, seed=1)
    before = catalog_state(gateway)
    runs = RefreshRun.objects.count()
    client.force_login(people[role])

    response = client.post(start_url(gateway))

    if role in REFRESHERS:
        run = latest_run(gateway)
        assert response.status_code == 302
        assert response["Location"] == preview_url(gateway, run)
        assert (run.trigger, run.status, run.applied) == ("admin", "succeeded", False)
        assert run.requested_by == people[role]
    else:
        expected = 403 if role in ("member", "viewer", "no_refresh_perm") else 404
        assert response.status_code == expected
        assert RefreshRun.objects.count() == runs
    assert catalog_state(gateway) == before  # a preview writes no catalog


@pytest.mark.parametrize("role", ROLES)
def test_preview_page_by_role(
    role: str, people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, _server = served_gateway(tools=3)
    run = dry_run(gateway)
    client.force_login(people[role])
    response = client.get(preview_url(gateway, run))
    assert response.status_code == PAGE_STATUS[role]
    if response.status_code == 200:
        assert b'id="ts-apply-form"' in response.content


@pytest.mark.parametrize("role", [*ROLES, "no_refresh_perm"])
def test_apply_by_role(
    role: str, people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=4)
    server.mutate(change=0.5, add=0.25, remove=0.0, seed=2)
    run = dry_run(gateway)
    before = catalog_state(gateway)
    client.force_login(people[role])

    response = client.post(apply_url(gateway), apply_form(run))

    if role in REFRESHERS:
        applied = latest_run(gateway)
        assert response.status_code == 302
        assert applied.applied and applied.pk != run.pk
        assert catalog_state(gateway) != before
    else:
        expected = 403 if role in ("member", "viewer", "no_refresh_perm") else 404
        assert response.status_code == expected
        assert latest_run(gateway) == run
        assert catalog_state(gateway) == before


@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("get", "start"),
        ("post", "start"),
        ("get", "preview"),
        ("post", "apply"),
        ("get", "change"),
    ],
)
def test_anonymous_is_sent_to_the_login_page(
    method: str, name: str, served_gateway: Any, client: Client
) -> None:
    gateway, _server = served_gateway(tools=2)
    run = dry_run(gateway)
    url = {
        "start": start_url(gateway),
        "preview": preview_url(gateway, run),
        "apply": apply_url(gateway),
        "change": reverse("admin:gateways_gateway_change", args=[gateway.pk]),
    }[name]
    response = getattr(client, method)(url, apply_form(run) if method == "post" else {})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
    assert latest_run(gateway) == run


def test_a_non_staff_user_is_sent_to_the_login_page(
    served_gateway: Any, client: Client, tenant: Any
) -> None:
    gateway, _server = served_gateway(tools=2)
    user = factories.UserFactory(is_staff=False)
    factories.MembershipFactory(user=user, tenant=tenant, role="owner")
    client.force_login(user)
    response = client.post(start_url(gateway))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
    assert not RefreshRun.objects.filter(trigger="admin").exists()


def test_nothing_refreshes_or_applies_over_get(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=3)
    server.mutate(change=0.5, add=0.5, remove=0.0, seed=3)
    run = dry_run(gateway)
    before = catalog_state(gateway)
    client.force_login(people["superuser"])

    # The Refresh URL over GET is a confirmation page with a POST form.
    page = client.get(start_url(gateway))
    assert page.status_code == 200
    assert b'<form method="post"' in page.content
    assert b"csrfmiddlewaretoken" in page.content
    # Apply exists only as POST; query strings do not make a GET apply.
    assert client.get(apply_url(gateway), apply_form(run)).status_code == 405
    assert client.get(preview_url(gateway, run), {"_apply": "1"}).status_code == 200

    assert latest_run(gateway) == run
    assert catalog_state(gateway) == before


def test_refresh_and_apply_need_the_csrf_token(
    people: dict[str, Any], served_gateway: Any
) -> None:
    gateway, server = served_gateway(tools=3)
    server.mutate(change=0.5, add=0.5, remove=0.0, seed=4)
    run = dry_run(gateway)
    before = catalog_state(gateway)
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["superuser"])

    assert client.post(start_url(gateway)).status_code == 403
    assert client.post(apply_url(gateway), apply_form(run)).status_code == 403

    assert latest_run(gateway) == run
    assert catalog_state(gateway) == before


@pytest.mark.parametrize("role", [*ROLES, "no_refresh_perm"])
def test_gateway_page_offers_refresh_only_to_who_may(
    role: str, people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, _server = served_gateway(tools=2)
    client.force_login(people[role])
    page = client.get(reverse("admin:gateways_gateway_change", args=[gateway.pk]))
    expected = 200 if role == "no_refresh_perm" else PAGE_STATUS[role]
    assert page.status_code == expected
    if expected == 200:
        offered = f'action="{start_url(gateway)}"'.encode() in page.content
        assert offered == (role in REFRESHERS)


# -- what the preview shows ---------------------------------------------------------------


def test_preview_shows_counts_note_and_readable_diffs(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=5)
    tools = server_tools(server)
    by_name = {t["name"]: t for t in tools}
    names = sorted(by_name)
    described, schemed, gone = names[0], names[1], names[2]
    by_name[described]["description"] = "Finds things. Now with fuzzy matching."
    by_name[schemed]["inputSchema"]["properties"]["page_token"] = {"type": "string"}
    tools = [t for t in tools if t["name"] != gone]
    tools.append(
        {"name": "brand_new", "title": "Brand new", "inputSchema": {"type": "object"}}
    )
    server.set_tools(tools)
    client.force_login(people["admin"])

    page = client.post(start_url(gateway), follow=True)

    assert page.status_code == 200
    report = page.context["report"]
    counts = {c.key: c.count for c in report.cards}
    assert counts == {
        "added": 1,
        "updated": 2,
        "returning": 0,
        "disappeared": 1,
        "unchanged": 2,
        "skipped": 0,
    }
    html = page.content.decode()
    assert report.note.startswith("Dry run: 1 added, 2 updated and 1 disappeared")
    assert f'id="ts-note">{report.note}</p>' in html
    # Grouped by change kind, each item with the fields that moved.
    updated = {
        i.name: i for i in next(g for g in report.groups if g.change == "updated").items
    }
    assert set(updated) == {described, schemed}
    assert updated[described].changed_fields == ["description"]
    # Description: a word diff; schema: a diff by JSON path.
    assert "<ins>fuzzy matching.</ins>" in html or "<ins>" in html
    text = updated[described].diffs[0]
    assert [s.kind for s in text.segments if s.kind != "equal"]
    assert "fuzzy" in "".join(s.text for s in text.segments if s.kind == "insert")
    schema = updated[schemed].diffs[0]
    assert [(p.path, p.kind) for p in schema.paths] == [
        ("$.properties.page_token.type", "added")
    ]
    assert "$.properties.page_token.type" in html
    assert 'data-group="disappeared"' in html and 'data-group="added"' in html
    assert "keep it active (deactivate_missing is off)" in html


def test_preview_shows_the_incomplete_catalog_banner_with_its_reason(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=6, page_size=2)
    server.remove_tools([sorted(server.state()["names"])[0]])
    server.fault("jsonrpc_error", page=1)
    client.force_login(people["admin"])

    page = client.post(start_url(gateway), follow=True)

    report = page.context["report"]
    assert not report.complete
    assert "injected error on page 1" in report.incomplete_reason
    html = page.content.decode()
    assert 'id="ts-incomplete"' in html
    assert "Incomplete catalog:" in html and "No tool is treated as disappeared" in html
    assert {c.key: c.count for c in report.cards}["disappeared"] == 0
    assert 'data-group="disappeared"' not in html


def test_preview_puts_the_servers_effect_hint_beside_the_current_effect(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=2)
    tools = server_tools(server)
    hinted = tools[0]
    hinted["annotations"] = {**(hinted.get("annotations") or {}), "readOnlyHint": True}
    hinted["description"] = "Reads only."
    server.set_tools(tools)
    client.force_login(people["admin"])

    page = client.post(start_url(gateway), follow=True)
    item = page.context["report"].groups[0].items[0]
    assert (item.name, item.effect, item.effect_hint, item.effect_after) == (
        hinted["name"],
        "write",
        "read",
        "write",
    )
    assert item.hint_differs and not item.effect_moves
    assert 'class="ts-differs"' in page.content.decode()

    # With apply_effect the same hint moves the effect; the preview says so first.
    run = latest_run(gateway)
    again = client.post(
        apply_url(gateway),
        {"preview_run": run.pk, "apply_effect": "on", "_preview": "1"},
        follow=True,
    )
    item = again.context["report"].groups[0].items[0]
    assert (item.effect, item.effect_after) == ("write", "read")
    assert item.effect_moves
    assert Tool.objects.get(gateway=gateway, name=hinted["name"]).effect == "write"


def test_preview_names_the_skill_revisions_that_still_name_a_disappeared_tool(
    people: dict[str, Any], served_gateway: Any, client: Client, tenant: Any
) -> None:
    gateway, server = served_gateway(tools=3)
    first, second = sorted(server.state()["names"])[:2]
    skill = skill_create(
        tenant=tenant, name="ops/triage", tools=[f"{gateway.prefix}__{first}"]
    )
    assert skill.revision_number == 1
    server.remove_tools([first])
    client.force_login(people["admin"])

    page = client.post(start_url(gateway), follow=True)

    referenced = page.context["report"].referenced
    assert [(i.name, i.referenced_by) for i in referenced] == [
        (first, ["ops/triage@1"])
    ]
    html = page.content.decode()
    section = html[html.index('id="ts-referenced"') :]
    assert first in section[:2000] and "ops/triage@1" in section[:2000]


def test_preview_lists_skipped_entries_with_their_reasons(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=2)
    server.add_tools(
        [
            {"name": "has space", "inputSchema": {"type": "object"}},
            {"name": "no_schema"},
            {"name": "twice", "inputSchema": {"type": "object"}},
            {"name": "twice", "inputSchema": {"type": "object"}},
        ]
    )
    client.force_login(people["admin"])

    page = client.post(start_url(gateway), follow=True)

    skipped = {(s.name, s.reason) for s in page.context["report"].skipped}
    assert {name for name, _ in skipped} == {"has space", "no_schema", "twice"}
    assert all(reason for _, reason in skipped)
    html = page.content.decode()
    assert 'id="ts-tools-skipped"' in html
    for name, reason in skipped:
        assert name in html and reason.replace("'", "&#x27;") in html


# -- apply --------------------------------------------------------------------------------


def test_apply_writes_exactly_the_previewed_catalog(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=5)
    server.mutate(change=0.4, add=0.4, remove=0.2, seed=5)
    client.force_login(people["owner"])
    preview = client.post(start_url(gateway), follow=True)
    run = preview.context["run"]
    counts = {c.key: c.count for c in preview.context["report"].cards}

    result = client.post(apply_url(gateway), apply_form(run), follow=True)

    applied = latest_run(gateway)
    assert result.redirect_chain[-1][0] == reverse(
        "admin:refresh_refreshrun_change", args=[applied.pk]
    )
    assert applied.applied and applied.options["expected_fingerprint"] == (
        run.catalog_fingerprint
    )
    assert applied.catalog_fingerprint == run.catalog_fingerprint
    assert {k: applied.summary[k] for k in counts} == counts
    assert any(m.startswith("Applied:") for m in messages_of(result))
    offered = set(server.state()["names"])
    active = set(gateway.tools.filter(active=True).values_list("name", flat=True))
    assert active == offered | {
        i["name"] for i in applied.report["items"] if i["change"] == "disappeared"
    }  # deactivate_missing was off: disappeared tools stay active
    # The run page renders the stored report like the preview did.
    assert {c.key: c.count for c in result.context["report"].cards} == counts


def test_apply_after_the_server_changed_writes_nothing_and_shows_the_new_preview(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=5)
    server.mutate(change=0.4, add=0.2, remove=0.0, seed=6)
    client.force_login(people["admin"])
    run = client.post(start_url(gateway), follow=True).context["run"]
    before = catalog_state(gateway)
    server.mutate(change=0.2, add=0.2, remove=0.0, seed=7)

    refused = client.post(apply_url(gateway), apply_form(run), follow=True)

    stale = latest_run(gateway)
    assert stale.pk != run.pk and not stale.applied
    assert stale.report["stale_preview"] is True
    assert refused.redirect_chain[-1][0] == preview_url(gateway, stale)
    assert catalog_state(gateway) == before
    assert any("server changed since the preview" in m for m in messages_of(refused))
    html = refused.content.decode()
    assert 'id="ts-stale"' in html and 'id="ts-apply-form"' in html
    assert refused.context["form"].initial["preview_run"] == stale.pk

    # The new preview is what Apply now writes.
    done = client.post(apply_url(gateway), apply_form(stale), follow=True)
    final = latest_run(gateway)
    assert final.applied
    assert any(m.startswith("Applied:") for m in messages_of(done))
    assert set(gateway.tools.values_list("name", flat=True)) >= set(
        server.state()["names"]
    )


def test_apply_with_other_options_than_the_preview_shows_a_new_preview_first(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=4)
    server.remove_tools([sorted(server.state()["names"])[0]])
    client.force_login(people["admin"])
    run = client.post(start_url(gateway), follow=True).context["run"]
    before = catalog_state(gateway)

    page = client.post(
        apply_url(gateway), apply_form(run, deactivate_missing=True), follow=True
    )

    assert catalog_state(gateway) == before
    assert any("options differ" in m for m in messages_of(page))
    again = page.context["run"]
    assert again.options["deactivate_missing"] is True and not again.applied
    assert "deactivate it" in page.content.decode()

    client.post(apply_url(gateway), apply_form(again, deactivate_missing=True))
    assert latest_run(gateway).applied
    assert gateway.tools.filter(active=False).count() == 1


@pytest.mark.parametrize("which", ["missing", "garbage", "foreign", "applied", "empty"])
def test_apply_refuses_anything_but_a_preview_of_this_gateway(
    which: str, people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, server = served_gateway(tools=3)
    other, _ = served_gateway(tools=2)
    server.mutate(change=0.5, add=0.5, remove=0.0, seed=8)
    applied = refresh_gateway(
        gateway=other,
        trigger=RefreshRun.Trigger.ADMIN,
        options=RefreshOptions(apply=True),
    )
    preview_run = {
        "missing": "999999",
        "garbage": "1 OR 1=1",
        "foreign": str(dry_run(other).pk),
        "applied": str(applied.pk),
        "empty": "",
    }[which]
    before, runs = catalog_state(gateway), RefreshRun.objects.count()
    client.force_login(people["superuser"])

    page = client.post(
        apply_url(gateway), {"preview_run": preview_run, "_apply": "1"}, follow=True
    )

    assert page.redirect_chain[-1][0] == reverse(
        "admin:gateways_gateway_change", args=[gateway.pk]
    )
    assert any("cannot be applied" in m for m in messages_of(page))
    assert catalog_state(gateway) == before
    assert RefreshRun.objects.count() == runs


def test_a_running_refresh_is_reported_with_its_run(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, _server = served_gateway(tools=2)
    running = RefreshRun.objects.create(
        gateway=gateway, trigger="schedule", status="running"
    )
    Gateway.objects.filter(pk=gateway.pk).update(
        lease_token=uuid.uuid4(),
        lease_expires_at=timezone.now() + timedelta(minutes=5),
        lease_run_id=running.pk,
    )
    client.force_login(people["admin"])

    page = client.post(start_url(gateway), follow=True)

    assert page.redirect_chain[-1][0] == reverse(
        "admin:gateways_gateway_change", args=[gateway.pk]
    )
    [message] = messages_of(page)
    assert "already running" in message
    assert reverse("admin:refresh_refreshrun_change", args=[running.pk]) in message
    refused = latest_run(gateway)
    assert (refused.status, refused.error_code) == ("skipped", "refresh_in_progress")
    # The list shows the gateway as busy.
    listing = client.get(reverse("admin:gateways_gateway_changelist"))
    assert "refreshing…" in listing.content.decode()


def test_an_unreachable_server_is_reported_and_nothing_is_written(
    people: dict[str, Any], client: Client, tenant: Any
) -> None:
    gateway = gateway_create(
        tenant=tenant, name="Down", prefix="down", url="http://127.0.0.1:9/mcp"
    )
    client.force_login(people["admin"])
    page = client.post(start_url(gateway), follow=True)
    [message] = messages_of(page)
    assert message.startswith("The server could not be reached")
    assert "Nothing was written" in message
    run = latest_run(gateway)
    assert run.status == "failed"
    assert not gateway.tools.exists()


def test_a_disabled_gateway_is_not_refreshed(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, _server = served_gateway(tools=2)
    Gateway.objects.filter(pk=gateway.pk).update(enabled=False)
    client.force_login(people["admin"])
    page = client.post(start_url(gateway), follow=True)
    assert messages_of(page) == [
        "This gateway is disabled. Enable it before refreshing it."
    ]
    assert latest_run(gateway).status == "skipped"


def test_a_caller_authenticated_gateway_asks_for_a_credential_and_keeps_none(
    people: dict[str, Any], mcp_server_factory: Any, client: Client, tenant: Any
) -> None:
    secret = "caller-secret-7f3a"
    server = mcp_server_factory(tools=2, require_bearer=secret)
    gateway = gateway_create(
        tenant=tenant,
        name="As caller",
        prefix="caller",
        url=server.url,
        auth_type=Gateway.AuthType.AS_CALLER,
    )
    client.force_login(people["admin"])

    form = client.get(start_url(gateway))
    assert b'name="probe_credential"' in form.content
    for bad in ("", "x" * 101):
        refused = client.post(start_url(gateway), {"probe_credential": bad})
        assert refused.status_code == 200
        assert refused.context["form"].errors["probe_credential"]
        assert bad not in refused.content.decode() or not bad
    assert not RefreshRun.objects.filter(gateway=gateway).exists()

    page = client.post(start_url(gateway), {"probe_credential": secret}, follow=True)
    run = latest_run(gateway)
    assert run.status == "succeeded"
    assert {c.key: c.count for c in page.context["report"].cards}["added"] == 2
    assert secret not in page.content.decode()
    assert secret not in str(run.options) + str(run.report)

    # Apply needs the credential again (it is never stored).
    missing = client.post(apply_url(gateway), apply_form(run))
    assert missing.status_code == 422
    assert not gateway.tools.exists()
    client.post(apply_url(gateway), {**apply_form(run), "probe_credential": secret})
    assert gateway.tools.count() == 2


def test_prompts_and_resources_are_previewed_and_applied_when_included(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, _server = served_gateway(tools=2, prompts=2, resources=3)
    client.force_login(people["admin"])
    first = client.post(start_url(gateway), follow=True)
    assert first.context["report"].sections == []  # not in the gateway's policy
    included = {"include_prompts": "on", "include_resources": "on"}

    page = client.post(
        apply_url(gateway),
        {"preview_run": first.context["run"].pk, "_preview": "1", **included},
        follow=True,
    )

    sections = {s.kind: s for s in page.context["report"].sections}
    assert {
        k: {c.key: c.count for c in s.cards}["added"] for k, s in sections.items()
    } == {
        "prompts": 2,
        "resources": 3,
    }
    html = page.content.decode()
    assert 'id="ts-prompts"' in html and 'id="ts-resources"' in html
    assert not Prompt.objects.filter(gateway=gateway).exists()
    again = page.context["run"]
    client.post(
        apply_url(gateway), {"preview_run": again.pk, "_apply": "1", **included}
    )
    assert Prompt.objects.filter(gateway=gateway).count() == 2
    assert Resource.objects.filter(gateway=gateway).count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_admins_applying_one_preview_at_once_write_it_once(
    served_gateway: Any, make_staff: Any, superuser: Any, tenant: Any
) -> None:
    """A double click, or two admins on the same preview: one refresh at a time."""
    gateway, server = served_gateway(tools=6)
    server.mutate(change=0.5, add=0.5, remove=0.0, seed=9)
    preview = dry_run(gateway)
    users = [superuser, make_staff(tenant=tenant, role="owner", username="second")]
    clients = []
    for user in users:
        client = Client()
        client.force_login(user)
        clients.append(client)
    barrier = threading.Barrier(len(clients))
    statuses: list[int] = []

    def click(client: Client) -> None:
        barrier.wait()
        try:
            statuses.append(
                client.post(apply_url(gateway), apply_form(preview)).status_code
            )
        finally:
            connections.close_all()

    threads = [threading.Thread(target=click, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert statuses == [302, 302]
    runs = list(
        RefreshRun.objects.filter(gateway=gateway, trigger="admin").exclude(
            pk=preview.pk
        )
    )
    assert len(runs) == 2
    wrote = [
        r
        for r in runs
        if r.applied and r.summary.get("updated", 0) + r.summary.get("added", 0)
    ]
    # Exactly one run wrote the previewed changes; the other either found the
    # lease taken (409 as a message) or, serialised after it, nothing to write.
    assert len(wrote) == 1
    other = next(r for r in runs if r is not wrote[0])
    assert (other.status, other.error_code) == ("skipped", "refresh_in_progress") or (
        other.applied and not any(other.summary.get(k) for k in ("added", "updated"))
    )
    for tool in Tool.objects.filter(gateway=gateway):
        numbers = list(
            tool.revisions.order_by("number").values_list("number", flat=True)
        )
        assert numbers == list(range(1, tool.current_revision + 1))
        assert tool.current_revision <= 2


def test_the_preview_of_an_applied_run_sends_you_to_its_record(
    people: dict[str, Any], served_gateway: Any, client: Client
) -> None:
    gateway, _server = served_gateway(tools=2)
    applied = latest_run(gateway)  # the fixture's first apply
    client.force_login(people["admin"])
    page = client.get(preview_url(gateway, applied), follow=True)
    assert page.redirect_chain[-1][0] == reverse(
        "admin:refresh_refreshrun_change", args=[applied.pk]
    )
    assert "not a preview that can be applied" in messages_of(page)[0]
    other, _ = served_gateway(tools=1)
    # A run of another gateway under this gateway's URL does not exist.
    assert client.get(preview_url(gateway, latest_run(other))).status_code == 404


@pytest.mark.parametrize("object_id", ["abc", "0", "99999", "1%20OR%201=1", "-1"])
def test_garbage_ids_in_admin_urls_are_404_and_run_nothing(
    object_id: str, people: dict[str, Any], client: Client, tenant: Any
) -> None:
    factories.GatewayFactory(tenant=tenant)
    tool = factories.ToolFactory(gateway=factories.GatewayFactory(tenant=tenant))
    client.force_login(people["admin"])
    base = "/admin/"
    for method, path in [
        ("post", f"gateways/gateway/{object_id}/refresh/"),
        ("get", f"gateways/gateway/{object_id}/refresh/"),
        ("post", f"gateways/gateway/{object_id}/refresh/apply/"),
        ("get", f"gateways/gateway/{object_id}/refresh/1/"),
        ("get", f"tools/tool/{object_id}/diff/"),
        ("post", f"tools/tool/{object_id}/approve/"),
        ("get", f"refresh/refreshrun/{object_id}/report.json"),
    ]:
        response = getattr(client, method)(base + path, {"preview_run": "1"})
        assert response.status_code == 404, (method, path, response.status_code)
    assert not RefreshRun.objects.exists()
    tool.refresh_from_db()
    assert tool.review_state == "pending"
