"""Tenant scoping for the Django admin.

Superusers see everything. Other staff users see and act only within the
tenants where they hold `admin` or `owner`; anything else behaves exactly
like an object that does not exist (404, never 403), as in the API.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from gateways.models import Gateway, Role, Tenant
from gateways.selectors import tenant_ids_for

ADMIN_ROLE = Role.ADMIN
REFRESH_PERMISSION = "gateways.refresh_gateway"


def admin_tenant_ids(user: Any) -> QuerySet[Any] | None:
    """Tenant ids the user administers in the admin; `None` means all (superuser)."""
    if user.is_superuser:
        return None
    return tenant_ids_for(user, min_role=ADMIN_ROLE)


def scope_queryset(qs: QuerySet[Any], user: Any, tenant_path: str) -> QuerySet[Any]:
    """`qs` narrowed to the user's administered tenants (`tenant_path` leads to Tenant)."""
    ids = admin_tenant_ids(user)
    if ids is None:
        return qs
    return qs.filter(**{f"{tenant_path}__in": ids})


def gateways_for_admin(user: Any) -> QuerySet[Gateway]:
    """The gateways a user may see and act on in the admin."""
    return scope_queryset(Gateway.objects.select_related("tenant"), user, "tenant_id")


def gateway_for_admin_or_404(user: Any, object_id: Any) -> Gateway:
    """A gateway in the user's scope; another tenant's answers 404 like a missing one."""
    try:
        return gateways_for_admin(user).get(pk=object_id)
    except (Gateway.DoesNotExist, ValueError, TypeError):
        raise Http404("no such gateway") from None


def can_refresh(user: Any, gateway: Gateway) -> bool:
    """Refresh/apply: superuser, or the permission plus admin/owner in the tenant."""
    if not user.is_active or not user.is_staff:
        return False
    if user.is_superuser:
        return True
    if not user.has_perm(REFRESH_PERMISSION):
        return False
    return (
        tenant_ids_for(user, min_role=ADMIN_ROLE)
        .filter(tenant_id=gateway.tenant_id)
        .exists()
    )


class TenantScopedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose rows, choices and object pages stay inside the user's tenants.

    `tenant_path` is the lookup from the model to its tenant id. Foreign keys
    to Tenant and Gateway offer only in-scope choices, and any object page for
    an out-of-scope (or missing) object raises 404.
    """

    tenant_path = "tenant_id"

    class Media:
        css = {"all": ("refresh/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scope_queryset(
            super().get_queryset(request), request.user, self.tenant_path
        )

    def formfield_for_foreignkey(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.related_model is Tenant:
            kwargs["queryset"] = scope_queryset(
                Tenant.objects.all(), request.user, "id"
            )
        elif db_field.related_model is Gateway:
            kwargs["queryset"] = gateways_for_admin(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def _in_scope_or_404(self, request: HttpRequest, object_id: str | None) -> None:
        if object_id is None:
            return
        if self.get_object(request, unquote(object_id)) is None:
            raise Http404(f"no such {self.opts.verbose_name}")

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        self._in_scope_or_404(request, object_id)
        return super().change_view(request, object_id, form_url, extra_context)

    def delete_view(
        self,
        request: HttpRequest,
        object_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        self._in_scope_or_404(request, object_id)
        return super().delete_view(request, object_id, extra_context)

    def history_view(
        self,
        request: HttpRequest,
        object_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        self._in_scope_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context)
