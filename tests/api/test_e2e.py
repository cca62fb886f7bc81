"""End to end over real HTTP, as the README's walkthrough does it: a token from
`create_api_token`, a real MCP test server, register, dry run, apply, the server
changes, refresh, read tools and revisions back."""

from __future__ import annotations

import io
from typing import Any

import pytest
import requests
from django.core.management import call_command


def create_token(*args: str) -> tuple[str, str]:
    out = io.StringIO()
    call_command("create_api_token", *args, stdout=out)
    text = out.getvalue()
    return text.strip().splitlines()[-1], text


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_register_dry_run_apply_change_refresh_read_back(
    live_server: Any, mcp_server_factory: Any
) -> None:
    server = mcp_server_factory(tools=12, page_size=5)
    token, _ = create_token("ops-bot", "--tenant", "acme", "--role", "admin")
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {token}"
    base = f"{live_server.url}/api"

    def call(method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        response = http.request(method, f"{base}{path}", json=body, timeout=60)
        assert response.status_code == expect, (method, path, response.text[:500])
        assert response.headers["Content-Type"] == "application/json"
        return response.json() if response.content else None

    gateway = call(
        "POST",
        "/gateways/",
        {"name": "Demo", "prefix": "demo", "url": server.url},
        expect=201,
    )
    assert gateway["tenant"] == "acme" and gateway["health"] == "unknown"
    refresh = f"/gateways/{gateway['id']}/tools/refresh"

    dry = call("POST", refresh, {})
    assert (dry["applied"], dry["complete"], dry["summary"]["added"]) == (
        False,
        True,
        12,
    )
    assert call("GET", f"/tools/?gateway={gateway['id']}")["count"] == 0

    applied = call("POST", refresh, {"apply": True})
    assert applied["applied"] is True and applied["summary"]["added"] == 12
    tools = call("GET", f"/tools/?gateway={gateway['id']}&page_size=100")["results"]
    assert len(tools) == 12
    assert all(t["gated"] and t["effect"] == "write" for t in tools)
    assert all(t["qualified_name"] == f"demo__{t['name']}" for t in tools)
    read = call("GET", f"/gateways/{gateway['id']}/")
    assert read["last_refresh_status"] == "succeeded" and read["protocol_version"]

    # The server changes: some tools change, one is added, one removed.
    server.mutate(change=0.25, add=0.01, remove=0.01, seed=7)
    report = call(
        "POST",
        "/tools/refresh",
        {"prefix": "demo", "apply": True, "deactivate_missing": True},
    )
    summary = report["summary"]
    assert (summary["added"], summary["disappeared"], summary["deactivated"]) == (
        1,
        1,
        1,
    )
    assert summary["updated"] == 3
    changed = [i["name"] for i in report["items"] if i["change"] == "updated"]
    gone = next(i["name"] for i in report["items"] if i["change"] == "disappeared")

    tools = {
        t["name"]: t
        for t in call("GET", f"/tools/?gateway={gateway['id']}&page_size=100")[
            "results"
        ]
    }
    assert len(tools) == 13 and tools[gone]["active"] is False
    assert call("GET", f"/tools/?gateway={gateway['id']}&active=false")["count"] == 1
    revisions = call("GET", f"/tools/{tools[changed[0]]['id']}/revisions/")
    assert [r["number"] for r in revisions["results"]] == [2, 1]
    assert revisions["results"][0]["refresh_run"] == report["run_id"]
    assert tools[changed[0]]["revision"] == 2

    runs = call("GET", f"/refresh-runs/?gateway={gateway['id']}")["results"]
    assert [(r["trigger"], r["applied"]) for r in runs] == [
        ("api", True),
        ("api", True),
        ("api", False),
    ]
    run = call("GET", f"/refresh-runs/{report['run_id']}/")
    assert run["report"]["summary"] == summary

    # The same token is refused once revoked (knox deletes the digest).
    from knox.models import AuthToken

    AuthToken.objects.filter(user__username="ops-bot").delete()
    assert http.get(f"{base}/tools/", timeout=10).status_code == 401
