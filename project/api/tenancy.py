"""Tenancy: every queryset of the API is scoped to the caller's tenants.

Another tenant's object is simply not in the queryset, so it answers 404 like
an id that does not exist: the API never hints that it exists.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import exceptions
from rest_framework.request import Request

from gateways.models import ROLE_RANK, Membership, Tenant

_CACHE_ATTR = "_toolsync_member_roles"


def member_roles(request: Request) -> dict[int, str]:
    """The caller's role per tenant id (one query per request, then cached)."""
    cached = getattr(request, _CACHE_ATTR, None)
    if cached is None:
        user = request.user
        if user is None or not user.is_authenticated:
            cached = {}
        else:
            cached = dict(
                Membership.objects.filter(user=user).values_list("tenant_id", "role")
            )
        setattr(request, _CACHE_ATTR, cached)
    return cached


def tenant_ids(request: Request, *, min_role: str = "viewer") -> list[int]:
    """Ids of the tenants where the caller holds at least `min_role`."""
    floor = ROLE_RANK[min_role]
    return sorted(t for t, r in member_roles(request).items() if ROLE_RANK[r] >= floor)


def has_role(request: Request, tenant_id: int, role: str) -> bool:
    held = member_roles(request).get(tenant_id)
    return held is not None and ROLE_RANK[held] >= ROLE_RANK[role]


def object_tenant_id(obj: Any) -> int:
    """The tenant an API object belongs to (directly or through its gateway)."""
    if hasattr(obj, "tenant_id"):
        return obj.tenant_id
    if hasattr(obj, "gateway"):
        return obj.gateway.tenant_id
    raise TypeError(f"{type(obj).__name__} has no tenant")


class TenantScopedQuerysetMixin:
    """Filter the view's queryset to the caller's tenants.

    `tenant_lookup` names the path from the model to the tenant id, e.g.
    `"tenant_id"` (default) or `"gateway__tenant_id"`. Views define
    `get_base_queryset()` (or `queryset`) with their own `select_related`.
    """

    tenant_lookup = "tenant_id"
    request: Request

    def get_base_queryset(self) -> QuerySet:
        return super().get_queryset()  # type: ignore[misc]

    def get_queryset(self) -> QuerySet:
        qs = self.get_base_queryset()
        if getattr(self, "swagger_fake_view", False):
            return qs.none()  # schema generation: no request user
        return qs.filter(**{f"{self.tenant_lookup}__in": tenant_ids(self.request)})


def tenant_for_write(request: Request, slug: str | None, *, role: str) -> Tenant:
    """The tenant a create acts in: the one named, or the caller's only one.

    A slug the caller holds no role in reads as unknown, never as forbidden:
    like another tenant's objects everywhere in the API, it is not a hint.
    """
    if slug:
        tenant = Tenant.objects.filter(slug=slug, pk__in=tenant_ids(request)).first()
        if tenant is None:
            raise exceptions.ValidationError({"tenant": ["No such tenant."]})
        if not has_role(request, tenant.pk, role):
            raise exceptions.PermissionDenied(
                f"This needs the {role} role (or higher) in the tenant."
            )
        return tenant
    eligible = tenant_ids(request, min_role=role)
    if not eligible:
        raise exceptions.PermissionDenied(
            f"This needs the {role} role (or higher) in the tenant."
        )
    if len(eligible) > 1:
        raise exceptions.ValidationError(
            {"tenant": [f"You hold the {role} role in several tenants; name one."]}
        )
    return Tenant.objects.get(pk=eligible[0])
