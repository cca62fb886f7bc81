"""Everything an MCP server says is escaped in the admin (issue 6, "Safety").

A real MCP test server offers tools whose titles, descriptions, schemas,
annotations, `_meta` and icons carry `<script>`, event handlers and
`javascript:` / `data:` URLs, plus an entry so broken it is skipped (its
name shown with the reason). Every page that shows them - preview, run
record, tool page, revision diff, the changed-since-approval banner, the
tool list - must render them as text: no markup of theirs, and no URL of
theirs in any `href`/`src` unless it is plain http(s). A real browser then
loads each page and proves that no script of theirs ran.
"""

from __future__ import annotations

import copy
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tests.browser import log_in
from tools.models import Tool
from tools.services import tool_approve

# Each payload sets window.__xss if it ever runs; the browser test checks it.
SCRIPT = "<script>window.__xss='script'</script>"
IMG = "<img src=x onerror=\"window.__xss='img'\">"
LINK = "<a href=\"javascript:window.__xss='link'\">click</a>"
PAYLOAD = f"{SCRIPT}{IMG}{LINK}"
HOSTILE_ICONS = [
    {"src": "javascript:window.__xss=1", "mimeType": "image/png"},
    {"src": "JaVaScRiPt:window.__xss=2"},
    {"src": "data:image/svg+xml,<svg/onload=window.__xss=3>"},
    {"src": "data:text/html,<script>window.__xss='data'</script>"},
    {"src": "https://example.com/i.png\" onerror=\"window.__xss='attr'"},
    {"src": "https://example.com/fine.png", "mimeType": f"image/png{SCRIPT}"},
]
URL_ATTRS = {"href", "src", "action", "formaction", "srcset", "poster", "xlink:href"}
PASSWORD = "escape-test-pw"


def hostile_tool(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "title": f"Title {PAYLOAD}",
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {"q": {"type": "string", "description": PAYLOAD}},
        },
        "annotations": {"title": PAYLOAD, "readOnlyHint": True},
        "icons": HOSTILE_ICONS,
        "_meta": {PAYLOAD: PAYLOAD},
    }


class Markup(HTMLParser):
    """Collect tags and their attributes, as a browser would parse them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.script_bodies: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_bodies.append(data)


def assert_inert(html: str) -> None:
    """No markup, handler or URL of the server's survives in `html`."""
    assert "__xss" in html  # the payload is on the page, as text
    parser = Markup()
    parser.feed(html)
    for tag, attrs in parser.tags:
        for name, value in attrs:
            value = (value or "").strip().lower()
            assert "__xss" not in value or name not in URL_ATTRS, (tag, name, value)
            if name.startswith("on"):
                assert "__xss" not in value, (tag, name, value)
            if name in URL_ATTRS:
                assert not value.startswith(("javascript:", "data:", "vbscript:")), (
                    tag,
                    name,
                    value,
                )
        if tag == "img":
            src = dict(attrs).get("src") or ""
            assert src.startswith(("http://", "https://", "/")), src
    assert not any("__xss" in body for body in parser.script_bodies)
    assert "<script>window.__xss" not in html
    assert "&lt;script&gt;window.__xss" in html


def hostile_pages(
    client: Client, gateway: Any, server: Any, user: Any
) -> dict[str, str]:
    """Walk the admin through the hostile catalog; return each page's URL."""
    client.force_login(user)
    start = reverse("admin:gateways_gateway_refresh", args=[gateway.pk])
    preview = client.post(start, follow=True)
    assert preview.status_code == 200
    run = preview.context["run"]
    urls = {"first preview": preview.redirect_chain[-1][0]}
    client.post(
        reverse("admin:gateways_gateway_refresh_apply", args=[gateway.pk]),
        {"preview_run": run.pk, "_apply": "1"},
    )
    applied = RefreshRun.objects.filter(gateway=gateway, applied=True).latest("pk")
    urls["applied run"] = reverse("admin:refresh_refreshrun_change", args=[applied.pk])
    tool = Tool.objects.get(gateway=gateway, name="evil_tool")
    urls["pending tool"] = reverse("admin:tools_tool_change", args=[tool.pk])
    tool_approve(tool=tool, user=user)

    tools = copy.deepcopy(server.snapshot()["tools"])
    for entry in tools:
        if entry.get("name") == "evil_tool":
            entry["description"] = f"Changed {PAYLOAD} again {LINK}"
            entry["icons"] = [*HOSTILE_ICONS, {"src": "javascript:window.__xss=4"}]
    server.set_tools(tools)
    second = client.post(start, follow=True)
    urls["preview of a change"] = second.redirect_chain[-1][0]
    refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.CLI,
        options=RefreshOptions(apply=True),
    )
    urls["changed tool"] = reverse("admin:tools_tool_change", args=[tool.pk])
    urls["revision diff"] = (
        reverse("admin:tools_tool_diff", args=[tool.pk]) + "?a=1&b=2"
    )
    urls["tool list"] = reverse("admin:tools_tool_changelist")
    urls["run list"] = reverse("admin:refresh_refreshrun_changelist")
    return urls


@pytest.fixture
def hostile_gateway(served_gateway: Any) -> tuple[Any, Any]:
    gateway, server = served_gateway(tools=1, apply=False)
    server.set_tools(
        [
            hostile_tool("evil_tool", f"Does things. {PAYLOAD}"),
            # Skipped (bad name, and no schema): shown in the skipped table.
            {"name": f"bad{SCRIPT}", "description": PAYLOAD},
        ]
    )
    return gateway, server


@pytest.mark.django_db
def test_every_page_renders_server_values_as_text(
    hostile_gateway: tuple[Any, Any], people: dict[str, Any], client: Client
) -> None:
    gateway, server = hostile_gateway
    urls = hostile_pages(client, gateway, server, people["admin"])
    for label, url in urls.items():
        response = client.get(url)
        assert response.status_code == 200, label
        html = response.content.decode()
        assert "<script>window.__xss" not in html, label
        if label in ("tool list", "run list"):
            continue  # lists show names, not the server's texts
        try:
            assert_inert(html)
        except AssertionError as exc:
            raise AssertionError(f"{label} ({url}): {exc}") from None
    # The skipped entry is listed by its (escaped) name, with a reason.
    first = client.get(urls["first preview"]).content.decode()
    assert "bad&lt;script&gt;window.__xss" in first
    # An http(s) icon is still shown as an image; the others only as text.
    assert '<img src="https://example.com/fine.png"' in first
    assert "(not shown: only http(s) icons are displayed)" in first


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_no_server_script_runs_in_a_browser(
    hostile_gateway: tuple[Any, Any], page: Any, screenshot: Any, superuser: Any
) -> None:
    gateway, server = hostile_gateway
    superuser.set_password(PASSWORD)
    superuser.save()
    urls = hostile_pages(Client(), gateway, server, superuser)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    log_in(page, superuser.username, PASSWORD)
    for label, url in urls.items():
        page.goto(url)
        page.wait_for_load_state("load")
        assert page.evaluate("typeof window.__xss") == "undefined", label
        # Open every folded section, so nothing hides in a closed <details>.
        page.evaluate(
            "document.querySelectorAll('details').forEach(d => d.open = true)"
        )
        assert page.evaluate("typeof window.__xss") == "undefined", label
        if label in ("first preview", "revision diff"):
            screenshot(label.replace(" ", "-"))
    assert dialogs == []
