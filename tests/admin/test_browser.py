"""The admin's refresh path in a real browser: Playwright driving Debian's Chromium.

The demo of `make run` (same tenant, login, gateway and skill, set up by the
`run_demo` command's own code) on a real MCP test server: log in, approve the
first catalog, read the gateway list, open the demo gateway, Refresh, read the
preview's counts, change an option (a new preview, nothing written), change
the server and click Apply (refused as stale; the new preview is shown), Apply
that, see tools and revisions updated, compare two revisions, approve a
changed tool.

Screenshots are artifacts in `test-artifacts/`; with
TOOLSYNC_UPDATE_SCREENSHOT=1 the preview also replaces the README's
`docs/admin-preview.png` (CI leaves the tree clean).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from gateways.models import Gateway
from refresh.management.commands import run_demo
from refresh.models import RefreshRun
from refresh.normalize import normalize_tools
from refresh.options import RefreshOptions
from refresh.services import normalize_limits, refresh_gateway
from skills.models import Skill
from tests.browser import ROOT, log_in
from tools.models import Tool, ToolRevision

DOCS_SCREENSHOT = ROOT / "docs" / "admin-preview.png"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def card(page: Any, key: str) -> int:
    return int(page.locator(f"#ts-summary [data-count={key}] .ts-card-n").inner_text())


def expected_counts(gateway: Gateway, server: Any) -> dict[str, int]:
    """What a preview must say: the server's live catalog hashed against our rows."""
    offered = normalize_tools(server.snapshot()["tools"], normalize_limits())
    assert not offered.skipped
    hashes = {e.key: e.spec_hash for e in offered.entries}
    active = dict(
        Tool.objects.filter(gateway=gateway, active=True).values_list(
            "name", "spec_hash"
        )
    )
    both = hashes.keys() & active.keys()
    updated = {n for n in both if hashes[n] != active[n]}
    return {
        "added": len(hashes.keys() - active.keys()),
        "updated": len(updated),
        "disappeared": len(active.keys() - hashes.keys()),
        "unchanged": len(both - updated),
        "returning": 0,
        "skipped": 0,
    }


def assert_cards(page: Any, want: dict[str, int]) -> None:
    assert {key: card(page, key) for key in want} == want


@pytest.fixture
def demo(mcp_server_factory: Any) -> tuple[Gateway, Any, Skill]:
    """What `make run` sets up: login, tenant, demo gateway, first apply, demo skill.

    Done before the browser starts: the probe runs an event loop of its own.
    """
    server = mcp_server_factory(tools=25, prompts=3)
    command = run_demo.Command()
    command._admin_login()
    gateway = command._demo_gateway(server.url)
    refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.CLI,
        options=RefreshOptions(apply=True),
    )
    command._demo_skill(gateway)
    gateway.refresh_from_db()
    return gateway, server, Skill.objects.get(name="demo/starter")


def test_refresh_preview_stale_apply_and_approve_in_a_browser(
    demo: tuple[Gateway, Any, Skill], page: Any, screenshot: Any
) -> None:
    gateway, server, skill = demo
    log_in(page, run_demo.DEMO_USER, run_demo.DEMO_PASSWORD)

    # The first catalog is pending review: approve all of it from the tool list.
    page.click("tr.model-tool th a")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 25
    page.check("#action-toggle")
    page.select_option("select[name=action]", "approve_selected")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist .success")
    assert "Approved 25 tools" in page.locator(".messagelist").inner_text()
    assert not Tool.objects.exclude(review_state="approved").exists()

    # The gateway list: health, last refresh with its counts, tools, schedule.
    page.click("#nav-sidebar tr.model-gateway th a")
    row = page.locator("#result_list tbody tr", has_text="Demo MCP server")
    assert row.locator("td.field-tool_count").inner_text().strip() == "25"
    last = row.locator("td.field-last_refresh").inner_text()
    assert "applied" in last and "+25" in last
    assert "every 60 s" in row.locator("td.field-next_refresh").inner_text()
    assert row.locator("td.field-health_badge").inner_text().strip()
    screenshot("1-gateways")

    # The server changes (one of the demo skill's tools goes); Refresh previews it.
    named = sorted(t.split("__", 1)[1] for t in skill.current_revision.tools)
    server.mutate(change=0.2, add=0.12, remove=0.0, seed=11)
    server.remove_tools([named[0]])
    want = expected_counts(gateway, server)
    assert want["added"] and want["updated"] and want["disappeared"] == 1
    row.locator("th a").click()
    page.wait_for_selector("#ts-refresh")
    screenshot("2-gateway")
    page.click("#ts-refresh")
    page.wait_for_selector("#ts-apply-form")
    assert_cards(page, want)
    assert page.locator("#ts-note").inner_text().startswith("Dry run:")
    updated = page.locator("[data-group=updated] tbody.ts-item")
    assert updated.count() == want["updated"]
    assert page.locator("[data-group=updated] .ts-field").count() >= want["updated"]
    gone = page.locator(f"[data-group=disappeared] [data-item='{named[0]}']")
    assert "keep it active" in gone.inner_text()
    referenced = page.locator("#ts-referenced").inner_text()
    assert named[0] in referenced and "demo/starter@1" in referenced
    added = page.locator("[data-group=added] tbody.ts-item").first.inner_text()
    assert "create it (write, gated, pending review)" in added
    preview_png = screenshot("3-preview")
    if os.environ.get("TOOLSYNC_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(preview_png, DOCS_SCREENSHOT)
    revisions = ToolRevision.objects.filter(tool__gateway=gateway).count()

    # Another option is another plan: a new preview first, nothing written.
    page.check("#id_deactivate_missing")
    page.click("#ts-apply")
    page.wait_for_selector(".messagelist .warning")
    assert "options differ" in page.locator(".messagelist").inner_text()
    assert page.is_checked("#id_deactivate_missing")
    assert "deactivate it" in page.locator(f"[data-item='{named[0]}']").inner_text()
    assert_cards(page, want)
    assert ToolRevision.objects.filter(tool__gateway=gateway).count() == revisions

    # The server changes again before Apply: nothing written, the new preview shown.
    server.mutate(change=0.1, add=0.08, remove=0.0, seed=12)
    page.click("#ts-apply")
    page.wait_for_selector("#ts-stale")
    assert (
        "server changed since the preview" in page.locator(".messagelist").inner_text()
    )
    assert ToolRevision.objects.filter(tool__gateway=gateway).count() == revisions
    assert Tool.objects.filter(gateway=gateway).count() == 25
    want = expected_counts(gateway, server)
    assert_cards(page, want)
    assert page.is_checked("#id_deactivate_missing")
    screenshot("4-stale-preview")

    # Apply the new preview: tools and revisions follow the server.
    page.click("#ts-apply")
    page.wait_for_selector(".messagelist .success")
    assert "Applied:" in page.locator(".messagelist").inner_text()
    assert page.locator(".field-outcome_badge .ts-badge").inner_text() == "applied"
    assert page.locator("#ts-summary [data-count=deactivated]").inner_text()
    assert "demo/starter" in page.locator("#ts-skills").inner_text()
    screenshot("5-applied-run")
    offered = set(server.state()["names"])
    active = set(
        Tool.objects.filter(gateway=gateway, active=True).values_list("name", flat=True)
    )
    assert active == offered
    assert not Tool.objects.get(gateway=gateway, name=named[0]).active  # not deleted
    changed_tools = Tool.objects.filter(gateway=gateway, review_state="changed")
    assert changed_tools.count() == want["updated"]
    assert {t.current_revision for t in changed_tools} == {2}
    skill.refresh_from_db()
    assert skill.status == "failed"

    # The changed tools, one tool's revisions, a side-by-side diff.
    page.goto(
        f"/admin/tools/tool/?gateway__id__exact={gateway.pk}&review_state__exact=changed"
    )
    assert page.locator("#result_list tbody tr").count() == want["updated"]
    target = changed_tools.order_by("name").first()
    assert target is not None
    page.click(f"#result_list a:text-is('{target.name}')")
    page.wait_for_selector("#ts-since-approval")
    inline = page.locator("#revisions-group tbody tr.has_original")
    assert inline.count() == 2
    assert "compare with #1" in inline.first.inner_text()
    screenshot("6-changed-tool")
    page.click("#ts-compare")
    page.wait_for_selector(".ts-fieldcmp")
    moved = page.locator(".ts-fieldcmp:not(.ts-same)")
    assert moved.count() >= 1
    assert all(
        name in ToolRevision.objects.get(tool=target, number=2).changed_fields
        for name in moved.evaluate_all("els => els.map(e => e.dataset.field)")
    )
    screenshot("7-revision-diff")

    # Approve it with the button on its page.
    page.click(f"a:text-is('{target.name}')")
    page.click("#ts-approve")
    page.wait_for_selector(".messagelist .success")
    assert f"Approved revision 2 of {target.name}" in page.inner_text(".messagelist")
    screenshot("8-approved")
    target.refresh_from_db()
    assert target.review_state == Tool.ReviewState.APPROVED
    assert target.approved_revision.number == 2
