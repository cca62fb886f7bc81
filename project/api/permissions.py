"""Role floors (SPEC 2, 6): `viewer < member < admin < owner`, per tenant.

Anonymous callers answer 401. Inside one's own tenant, below the floor answers
403. Objects of other tenants never reach a permission check: the scoped
queryset leaves them out, so they answer 404.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, permissions
from rest_framework.request import Request

from gateways.models import ROLE_RANK
from project.api.tenancy import has_role, member_roles, object_tenant_id


class RoleFloor(permissions.BasePermission):
    """Require at least `role` in the object's tenant.

    Use as `permission_classes = [RoleFloor("member")]`: DRF instantiates
    permission classes by calling them, and an instance returns itself.

    Without an object (lists, creates, prefix-addressed actions) the caller
    must hold the floor in at least one tenant; the view then checks the
    specific tenant with `require_role` once it knows it.
    """

    def __init__(self, role: str = "viewer") -> None:
        if role not in ROLE_RANK:
            raise ValueError(f"unknown role {role!r}")
        self.role = role
        self.message = f"This needs the {role} role (or higher) in the tenant."

    def __call__(self) -> RoleFloor:
        return self

    def __repr__(self) -> str:
        return f"RoleFloor({self.role!r})"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        if self.role == "viewer":
            return True
        lookup = getattr(view, "lookup_url_kwarg", None) or getattr(
            view, "lookup_field", "pk"
        )
        if lookup in (getattr(view, "kwargs", None) or {}):
            # A detail route: the object check decides, after the 404 scoping.
            return True
        floor = ROLE_RANK[self.role]
        return any(ROLE_RANK[r] >= floor for r in member_roles(request).values())

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        return has_role(request, object_tenant_id(obj), self.role)


def require_role(request: Request, tenant_id: int, role: str) -> None:
    """Raise 403 unless the caller holds at least `role` in `tenant_id`."""
    if not has_role(request, tenant_id, role):
        raise exceptions.PermissionDenied(
            f"This needs the {role} role (or higher) in the tenant."
        )


class _DenyAll(permissions.BasePermission):
    message = "This action has no role floor configured."

    def has_permission(self, request: Request, view: Any) -> bool:
        return False


class RoleFloorMixin:
    """Per-action floors for a viewset: `role_floors = {"list": "viewer", ...}`.

    An action missing from `role_floors` is refused for everyone (a new
    action cannot ship without a floor).
    """

    role_floors: dict[str, str] = {}
    action: str | None

    def get_permissions(self) -> list[permissions.BasePermission]:
        action = self.action or ""
        if action not in self.role_floors:
            if action in ("metadata", ""):  # OPTIONS / unknown method: 405 later
                return [RoleFloor("viewer")]
            return [RoleFloor("viewer"), _DenyAll()]
        return [RoleFloor(self.role_floors[action])]
