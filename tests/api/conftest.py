"""Fixtures for the HTTP API tests: a tenant in every role, real tokens, a small world."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from refresh.models import RefreshRun
from skills.services import skill_create
from tests import factories

ROLES = ("viewer", "member", "admin", "owner")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """Users here log in with tokens; PBKDF2's 1M rounds per user only cost time."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def bearer_client(user: Any | None) -> APIClient:
    """An API client that authenticates with a real (hashed) knox token."""
    client = APIClient()
    if user is not None:
        _, token = AuthToken.objects.create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def error_of(response: Any) -> dict[str, Any]:
    """The envelope's `error` object; fails unless the body is exactly the envelope."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


def field_errors(response: Any) -> dict[str, str]:
    """Field path -> code of a validation failure (422)."""
    assert response.status_code == 422, (response.status_code, response.content)
    error = error_of(response)
    return {e["field"]: e["code"] for e in error["details"]["errors"]}


@dataclass
class World:
    """Tenant `acme` (a user per role) and tenant `rival` (its own admin)."""

    tenant: Any
    rival: Any
    users: dict[str, Any]
    gateway: Any
    spare: Any
    tools: list[Any]
    run: Any
    skill: Any
    rival_gateway: Any
    rival_tool: Any

    def client(self, role: str) -> APIClient:
        """`anonymous`, a role in acme, or `other_admin` (admin of rival)."""
        return bearer_client(self.users.get(role))


@pytest.fixture
def world(db: Any) -> World:
    tenant = factories.TenantFactory(slug="acme")
    rival = factories.TenantFactory(slug="rival")
    users: dict[str, Any] = {}
    for role in ROLES:
        users[role] = factories.UserFactory(username=f"acme-{role}")
        factories.MembershipFactory(user=users[role], tenant=tenant, role=role)
    users["other_admin"] = factories.UserFactory(username="rival-admin")
    factories.MembershipFactory(user=users["other_admin"], tenant=rival, role="admin")

    gateway = factories.GatewayFactory(
        tenant=tenant, prefix="crm", name="CRM", last_catalog_complete=True
    )
    spare = factories.GatewayFactory(tenant=tenant, prefix="spare", name="Spare")
    tools = [
        factories.ToolFactory(gateway=gateway, name=name)
        for name in ("search_contacts", "create_invoice")
    ]
    run = factories.RefreshRunFactory(
        gateway=gateway, status=RefreshRun.Status.SUCCEEDED
    )
    skill = skill_create(
        tenant=tenant, name="team/sales", tools=["crm__search_contacts"]
    )
    rival_gateway = factories.GatewayFactory(tenant=rival, prefix="erp", name="ERP")
    rival_tool = factories.ToolFactory(gateway=rival_gateway, name="post_ledger")
    return World(
        tenant=tenant,
        rival=rival,
        users=users,
        gateway=gateway,
        spare=spare,
        tools=tools,
        run=run,
        skill=skill,
        rival_gateway=rival_gateway,
        rival_tool=rival_tool,
    )


@pytest.fixture
def offered_tools() -> Callable[..., list[dict[str, Any]]]:
    """Raw MCP tool dicts (wire form) for the fake probe."""

    def build(*names: str, read_only: bool = False) -> list[dict[str, Any]]:
        return [
            {
                "name": name,
                "description": f"Does {name}.",
                "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": read_only},
            }
            for name in names
        ]

    return build
