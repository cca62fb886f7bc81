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

# Real Celery workers on a real broker, for the list action's end-to-end test.
from tests.schedule.conftest import broker, celery_cluster  # noqa: F401

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


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    # Test users only: the default hasher costs ~0.3 s per user, and a
    # permission matrix makes seven of them per test.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


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


# Who may do what in the admin (SPEC 6 roles, issue 6): the expected status of
# an object page for each kind of user, and whether they may refresh.
ROLES = ("superuser", "owner", "admin", "member", "viewer", "outsider")
PAGE_STATUS = {
    "superuser": 200,
    "owner": 200,
    "admin": 200,
    "member": 403,  # own tenant, below the admin floor
    "viewer": 403,
    "outsider": 404,  # another tenant's admin: as if it did not exist
}


@pytest.fixture
def people(
    make_staff: Callable[..., Any], superuser: Any, tenant: Any
) -> dict[str, Any]:
    """One user per role in `tenant`, plus an admin of another tenant."""
    other = factories.TenantFactory(slug="elsewhere")
    return {
        "superuser": superuser,
        "owner": make_staff(tenant=tenant, role="owner", username="owner"),
        "admin": make_staff(tenant=tenant, role="admin", username="tadmin"),
        "member": make_staff(tenant=tenant, role="member", username="member"),
        "viewer": make_staff(tenant=tenant, role="viewer", username="viewer"),
        "outsider": make_staff(tenant=other, role="admin", username="outsider"),
        "no_refresh_perm": make_staff(
            tenant=tenant,
            role="admin",
            username="noperm",
            perms=[p for p in STAFF_PERMISSIONS if p != "gateways.refresh_gateway"],
        ),
    }
