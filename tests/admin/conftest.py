"""Fixtures for the admin tests: users in each role, a gateway on a real MCP test server."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tests import factories

# What a tenant administrator's staff account is given in the admin.
STAFF_PERMISSIONS = (
    "gateways.view_gateway",
    "gateways.change_gateway",
    "gateways.add_gateway",
    "gateways.refresh_gateway",
    "tools.view_tool",
    "tools.change_tool",
    "tools.view_toolrevision",
    "refresh.view_refreshrun",
)


def grant(user: Any, perms: Iterable[str]) -> Any:
    for dotted in perms:
        app_label, codename = dotted.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


@pytest.fixture
def make_staff(db: Any) -> Callable[..., Any]:
    """A staff user with `role` in `tenant` (or none) and the given Django permissions."""

    def make(
        *,
        tenant: Any = None,
        role: str | None = "admin",
        perms: Iterable[str] = STAFF_PERMISSIONS,
        username: str | None = None,
    ) -> Any:
        kwargs = {"username": username} if username else {}
        user = factories.UserFactory(is_staff=True, **kwargs)
        grant(user, perms)
        if tenant is not None and role is not None:
            factories.MembershipFactory(user=user, tenant=tenant, role=role)
        return user

    return make


@pytest.fixture
def superuser(db: Any) -> Any:
    return factories.UserFactory(username="root", is_staff=True, is_superuser=True)


@pytest.fixture
def served_gateway(
    mcp_server_factory: Callable[..., Any], tenant: Any
) -> Callable[..., Any]:
    """A gateway on a real HTTP MCP test server, its catalog applied once."""

    def make(
        *, tools: int = 6, apply: bool = True, **server_kw: Any
    ) -> tuple[Any, Any]:
        server = mcp_server_factory(tools=tools, **server_kw)
        gateway = factories.GatewayFactory(tenant=tenant, url=server.url)
        if apply:
            refresh_gateway(
                gateway=gateway,
                trigger=RefreshRun.Trigger.CLI,
                options=RefreshOptions(apply=True),
            )
            gateway.refresh_from_db()
        return gateway, server

    return make
