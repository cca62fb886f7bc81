"""The admin's refresh path in a real browser: Playwright driving Debian's Chromium.

Log in, open the demo gateway, Refresh, read the preview's counts, change
the server, Apply and see the stale preview refused with the new one shown,
Apply that, see tools and revisions updated, compare two revisions, approve a
changed tool. Screenshots go to `test-artifacts/`; with
TOOLSYNC_UPDATE_SCREENSHOTS=1 the preview also replaces the README's
`docs/admin-preview.png`.

The browser is the system package (`apt-get install chromium`, which `.ci/run`
does); Playwright never downloads one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from gateways.models import Gateway
from gateways.services import gateway_create, membership_set, tenant_get_or_create
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tools.models import Tool, ToolRevision
from tools.services import tool_approve

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
DOCS_SCREENSHOT = ROOT / "docs" / "admin-preview.png"
CHROMIUM = os.environ.get("TOOLSYNC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
]
PASSWORD = "toolsync-demo"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Chromium page; a missing browser fails loudly (CI installs it)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install it with `apt-get install -y chromium` "
            "(.ci/run does this); browsers are never downloaded by Playwright here"
        )
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread between calls;
    # the ORM calls this test makes in between are plain synchronous code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1360, "height": 900})
        context.set_default_timeout(60_000)
        tab = context.new_page()
        try:
            yield tab
        finally:
            context.close()
            browser.close()


def shot(page: Any, name: str) -> Path:
    target = ARTIFACTS / f"admin-{name}.png"
    page.screenshot(path=str(target), full_page=True)
    return target


def card(page: Any, key: str) -> int:
    return int(page.locator(f"#ts-summary [data-count={key}] .ts-card-n").inner_text())


def expected_counts(gateway: Gateway, server: Any, changed: set[str]) -> dict[str, int]:
    """What the preview must say, from the server's live state and our rows."""
    offered = set(server.state()["names"])
    rows = set(Tool.objects.filter(gateway=gateway).values_list("name", flat=True))
    updated = {n for n in changed if n in rows and n in offered}
    return {
        "added": len(offered - rows),
        "updated": len(updated),
        "disappeared": len(rows - offered),
        "unchanged": len((rows & offered) - updated),
    }


@pytest.fixture
def demo(mcp_server_factory: Any) -> tuple[Gateway, Any, Any]:
    """The demo of `make run`: tenant "demo", the bundled server, a first apply.

    Set up before the browser starts: Playwright's sync API keeps an event
    loop in this thread, and the probe runs its own.
    """
    server = mcp_server_factory(tools=25, prompts=3)
    user = get_user_model().objects.create_superuser(
        "admin", "admin@example.com", PASSWORD
    )
    tenant = tenant_get_or_create(slug="demo", name="Demo")
    membership_set(user=user, tenant=tenant, role="owner")
    gateway = gateway_create(
        tenant=tenant, name="Demo MCP server", prefix="demo", url=server.url
    )
    refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.CLI,
        options=RefreshOptions(apply=True),
    )
    for tool in Tool.objects.filter(gateway=gateway):
        tool_approve(tool=tool, user=user)
    return gateway, server, user


def test_refresh_preview_stale_apply_and_approve_in_a_browser(
    demo: tuple[Gateway, Any, Any], page: Any, live_server: Any
) -> None:
    gateway, server, _user = demo
    assert Tool.objects.filter(gateway=gateway).count() == 25

    # Log in and open the demo gateway from the list.
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.click("text=Gateways")
    row = page.locator("#result_list tbody tr", has_text="demo")
    assert row.locator("td.field-tool_count").inner_text().strip() == "25"
    assert "applied" in row.locator("td.field-last_refresh").inner_text()
    shot(page, "1-gateways")
    row.locator("th a").click()
    page.wait_for_selector("#ts-refresh")

    # The server changes; Refresh previews it.
    first = server.mutate(change=0.2, add=0.12, remove=0.12, seed=11)
    changed = set(first["changed"])
    want = expected_counts(gateway, server, changed)
    assert want["added"] and want["updated"] and want["disappeared"]
    page.click("#ts-refresh")
    page.wait_for_selector("#ts-apply-form")
    for key, count in want.items():
        assert card(page, key) == count, key
    assert "Dry run" in page.locator("#ts-note").inner_text()
    updated_group = page.locator("[data-group=updated]")
    assert updated_group.locator("tbody.ts-item").count() == want["updated"]
    assert page.locator("[data-group=updated] .ts-field").count() >= want["updated"]
    preview_png = shot(page, "2-preview")
    if os.environ.get("TOOLSYNC_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(preview_png, DOCS_SCREENSHOT)

    # The server changes again before Apply: nothing written, new preview shown.
    second = server.mutate(change=0.1, add=0.08, remove=0.0, seed=12)
    changed |= set(second["changed"])
    revisions_before = ToolRevision.objects.filter(tool__gateway=gateway).count()
    page.click("#ts-apply")
    page.wait_for_selector("#ts-stale")
    assert (
        "server changed since the preview" in page.locator(".messagelist").inner_text()
    )
    assert (
        ToolRevision.objects.filter(tool__gateway=gateway).count() == revisions_before
    )
    assert Tool.objects.filter(gateway=gateway).count() == 25
    want = expected_counts(gateway, server, changed)
    for key, count in want.items():
        assert card(page, key) == count, key
    shot(page, "3-stale-preview")

    # Apply the new preview: tools and revisions follow the server.
    page.click("#ts-apply")
    page.wait_for_selector(".messagelist .success")
    assert "Applied" in page.locator(".messagelist").inner_text()
    assert "applied" in page.locator(".field-outcome_badge").inner_text()
    shot(page, "4-applied-run")
    offered = set(server.state()["names"])
    names = set(Tool.objects.filter(gateway=gateway).values_list("name", flat=True))
    assert offered <= names  # added ones exist; disappeared ones kept (not deleted)
    changed_tools = Tool.objects.filter(
        gateway=gateway, review_state=Tool.ReviewState.CHANGED
    )
    assert changed_tools.count() == want["updated"]
    assert all(t.current_revision == 2 for t in changed_tools)

    # Review: the changed tools, one tool's revisions, a side-by-side diff.
    page.goto(
        f"{live_server.url}/admin/tools/tool/?gateway__id__exact={gateway.pk}"
        "&review_state__exact=changed"
    )
    assert page.locator("#result_list tbody tr").count() == want["updated"]
    target = changed_tools.order_by("name").first()
    assert target is not None
    page.click(f"#result_list a:text-is('{target.name}')")
    page.wait_for_selector("#ts-since-approval")
    assert (
        page.locator(
            "#revisions-group tbody tr.has_original, #revisions-group tbody tr"
        )
        .filter(has_text="run")
        .count()
        >= 2
    )
    shot(page, "5-changed-tool")
    page.click("#ts-compare")
    page.wait_for_selector(".ts-fieldcmp")
    assert page.locator(".ts-fieldcmp .ts-badge.ts-warn").count() >= 1
    shot(page, "6-revision-diff")

    # Approve it with the list action.
    page.goto(
        f"{live_server.url}/admin/tools/tool/?gateway__id__exact={gateway.pk}"
        "&review_state__exact=changed"
    )
    page.locator("#result_list tbody tr", has_text=target.name).locator(
        "input.action-select"
    ).check()
    page.select_option("select[name=action]", "approve_selected")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist .success")
    assert "Approved 1 tool" in page.locator(".messagelist").inner_text()
    shot(page, "7-approved")
    target.refresh_from_db()
    assert target.review_state == Tool.ReviewState.APPROVED
    assert target.approved_revision is not None
    assert target.approved_revision.number == 2
