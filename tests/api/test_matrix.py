"""Every endpoint x every caller -> the status SPEC 6 says (roles, tenancy, 401/403/404).

The table below is checked against the URL patterns really routed: an endpoint
(or a method on one) added without a row here fails `test_matrix_covers_every_route`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from tests.api.conftest import World, error_of

CALLERS = ("anonymous", "viewer", "member", "admin", "owner", "other_admin")

# Paths outside /api/ that SPEC 6 lists too.
OTHER_ENDPOINTS = ("healthz", "metrics")


@dataclass(frozen=True)
class Row:
    method: str
    route: str  # the Django route, e.g. "api/tools/<int:pk>/"
    statuses: tuple[int, ...]  # one per caller, in CALLERS order
    path: Callable[[World], str] = field(default=lambda w: "")
    body: Callable[[World], Any] | None = None
    json: bool = True  # does the endpoint answer JSON (and failures the envelope)?
    # Error codes where they differ from ERROR_CODES (a named 422, say).
    codes: dict[int, str] = field(default_factory=dict)

    @property
    def expected(self) -> dict[str, int]:
        return dict(zip(CALLERS, self.statuses, strict=True))


def _gw(w: World) -> str:
    return f"/api/gateways/{w.gateway.pk}/"


def _tool(w: World) -> str:
    return f"/api/tools/{w.tools[0].pk}/"


def _skill(w: World) -> str:
    return f"/api/skills/{w.skill.pk}/"


#        anonymous viewer member admin owner other_admin
VIEWER = (401, 200, 200, 200, 200, 404)  # read one object of acme
LIST = (401, 200, 200, 200, 200, 200)  # lists: other_admin sees only rival's rows
PUBLIC = (200, 200, 200, 200, 200, 200)

MATRIX = [
    # gateways
    Row("GET", "api/gateways/", LIST, lambda w: "/api/gateways/"),
    Row(
        "POST",
        "api/gateways/",
        (401, 403, 403, 201, 201, 422),  # rival's admin: "tenant: No such tenant."
        lambda w: "/api/gateways/",
        lambda w: {
            "tenant": "acme",
            "name": "New",
            "prefix": "new",
            "url": "http://127.0.0.1:9/mcp",
        },
    ),
    Row("GET", "api/gateways/<int:pk>/", VIEWER, _gw),
    Row(
        "PATCH",
        "api/gateways/<int:pk>/",
        (401, 403, 403, 200, 200, 404),
        _gw,
        lambda w: {"name": "Renamed"},
    ),
    Row(
        "DELETE",
        "api/gateways/<int:pk>/",
        (401, 403, 403, 204, 204, 404),
        lambda w: f"/api/gateways/{w.spare.pk}/",
    ),
    Row(
        "POST",
        "api/gateways/<int:pk>/tools/refresh",
        (401, 403, 200, 200, 200, 404),
        lambda w: f"/api/gateways/{w.gateway.pk}/tools/refresh",
        lambda w: {},
    ),
    # tools
    Row(
        "POST",
        "api/tools/refresh",
        (401, 403, 200, 200, 200, 422),  # rival has no tool with prefix crm
        lambda w: "/api/tools/refresh",
        lambda w: {"prefix": "crm"},
        codes={422: "prefix_not_imported"},
    ),
    Row("GET", "api/tools/", LIST, lambda w: "/api/tools/"),
    Row("GET", "api/tools/<int:pk>/", VIEWER, _tool),
    Row(
        "PATCH",
        "api/tools/<int:pk>/",
        (401, 403, 200, 200, 200, 404),
        _tool,
        lambda w: {"alias": "Find a contact"},
    ),
    Row(
        "GET",
        "api/tools/<int:pk>/revisions/",
        VIEWER,
        lambda w: _tool(w) + "revisions/",
    ),
    Row(
        "POST",
        "api/tools/<int:pk>/approve",
        (401, 403, 403, 200, 200, 404),
        lambda w: f"/api/tools/{w.tools[0].pk}/approve",
        lambda w: {},
    ),
    # refresh runs
    Row("GET", "api/refresh-runs/", LIST, lambda w: "/api/refresh-runs/"),
    Row(
        "GET",
        "api/refresh-runs/<int:pk>/",
        VIEWER,
        lambda w: f"/api/refresh-runs/{w.run.pk}/",
    ),
    # skills
    Row("GET", "api/skills/", LIST, lambda w: "/api/skills/"),
    Row(
        "POST",
        "api/skills/",
        (401, 403, 403, 201, 201, 422),
        lambda w: "/api/skills/",
        lambda w: {"tenant": "acme", "name": "team/new", "tools": []},
    ),
    Row(
        "POST",
        "api/skills/refresh",
        (401, 403, 200, 200, 200, 422),
        lambda w: "/api/skills/refresh",
        lambda w: {"tenant": "acme"},
    ),
    Row("GET", "api/skills/<int:pk>/", VIEWER, _skill),
    Row(
        "GET",
        "api/skills/<int:pk>/revisions/",
        VIEWER,
        lambda w: _skill(w) + "revisions/",
    ),
    Row(
        "POST",
        "api/skills/<int:pk>/revisions/",
        (401, 403, 403, 201, 201, 404),
        lambda w: _skill(w) + "revisions/",
        lambda w: {"tools": ["crm__create_invoice"]},
    ),
    # documentation, health, metrics, browsable-API login: public
    Row("GET", "api/schema/", PUBLIC, lambda w: "/api/schema/", json=False),
    Row("GET", "api/docs/", PUBLIC, lambda w: "/api/docs/", json=False),
    Row("GET", "healthz", PUBLIC, lambda w: "/healthz"),
    Row("GET", "metrics", PUBLIC, lambda w: "/metrics", json=False),
    # Any other /api/ path: the envelope's 404 (the last route, a catch-all).
    Row("GET", "^api/", (404,) * 6, lambda w: "/api/no-such-thing/"),
    Row("GET", "api/auth/login/", PUBLIC, lambda w: "/api/auth/login/", json=False),
    # An empty login form is re-displayed with its errors (200), signing no one in.
    Row(
        "POST",
        "api/auth/login/",
        PUBLIC,
        lambda w: "/api/auth/login/",
        lambda w: {},
        json=False,
    ),
    Row(
        "PUT",
        "api/auth/login/",
        PUBLIC,
        lambda w: "/api/auth/login/",
        lambda w: {},
        json=False,
    ),
    Row(
        "POST",
        "api/auth/logout/",
        PUBLIC,
        lambda w: "/api/auth/logout/",
        lambda w: {},
        json=False,
    ),
]

ERROR_CODES = {
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    422: "validation_error",
}


def _walk(patterns: list[Any], prefix: str = "") -> list[tuple[str, Any]]:
    routes = []
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            routes += _walk(entry.url_patterns, route)
        elif isinstance(entry, URLPattern):
            routes.append((route, entry.callback))
    return routes


def _methods(callback: Any) -> set[str]:
    """The HTTP methods a view answers (besides OPTIONS and HEAD)."""
    actions = getattr(callback, "actions", None)
    if actions:  # a DRF viewset route (DRF maps HEAD onto GET itself)
        return {m.upper() for m in actions if m not in ("options", "head")}
    view_class = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    if view_class is None:  # a plain function view
        return {"GET"}
    return {
        m.upper()
        for m in view_class.http_method_names
        if m not in ("options", "head") and hasattr(view_class, m)
    }


def routed_endpoints() -> set[tuple[str, str]]:
    found = set()
    for route, callback in _walk(get_resolver().url_patterns):
        if route.lstrip("^").startswith("api/") or route in OTHER_ENDPOINTS:
            found |= {(method, route) for method in _methods(callback)}
    return found


def test_matrix_covers_every_route():
    rows = {(r.method, r.route) for r in MATRIX}
    assert len(rows) == len(MATRIX), "a row appears twice"
    routed = routed_endpoints()
    assert routed - rows == set(), "routed endpoints without a row in the matrix"
    assert rows - routed == set(), "matrix rows for endpoints that are not routed"


def test_matrix_has_every_spec_endpoint():
    spec_6 = {
        ("GET", "api/gateways/"),
        ("GET", "api/gateways/<int:pk>/"),
        ("POST", "api/gateways/"),
        ("PATCH", "api/gateways/<int:pk>/"),
        ("DELETE", "api/gateways/<int:pk>/"),
        ("POST", "api/gateways/<int:pk>/tools/refresh"),
        ("POST", "api/tools/refresh"),
        ("GET", "api/tools/"),
        ("GET", "api/tools/<int:pk>/"),
        ("GET", "api/tools/<int:pk>/revisions/"),
        ("PATCH", "api/tools/<int:pk>/"),
        ("POST", "api/tools/<int:pk>/approve"),
        ("GET", "api/refresh-runs/"),
        ("GET", "api/refresh-runs/<int:pk>/"),
        ("GET", "api/skills/"),
        ("POST", "api/skills/refresh"),
        ("GET", "api/schema/"),
        ("GET", "api/docs/"),
        ("GET", "metrics"),
        ("GET", "healthz"),
    }
    assert spec_6 <= routed_endpoints()


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("row", MATRIX, ids=lambda r: f"{r.method} {r.route}")
def test_status(row: Row, caller: str, world: World, fake_probe, offered_tools):
    fake_probe.set_tools(offered_tools("search_contacts", "create_invoice"))
    client = world.client(caller)
    body = row.body(world) if row.body else None
    response = client.generic(
        row.method,
        row.path(world),
        data=None if body is None else json.dumps(body),
        content_type="application/json",
    )
    expected = row.expected[caller]
    assert response.status_code == expected, (
        caller,
        row.method,
        row.route,
        response.content[:500],
    )
    if not row.json:
        return
    if expected >= 400:
        code = row.codes.get(expected, ERROR_CODES[expected])
        assert error_of(response)["code"] == code
    elif expected != 204:
        response.json()  # a JSON body
    if caller == "other_admin" and expected == 200 and row.method == "GET":
        # Scoped lists: rival's admin sees rival's rows, never acme's.
        text = response.content.decode()
        for needle in ('"tenant":"acme"', '"prefix":"crm"', "crm__"):
            assert needle not in text.replace(" ", "")
