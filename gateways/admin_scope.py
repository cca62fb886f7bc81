"""Tenant scoping for the Django admin.

Superusers see everything. Other staff users see and act only within the
tenants where they hold `admin` or `owner`. Object pages follow the API's
rule: another tenant's object (or a missing one) answers 404, never 403, so
the admin does not reveal what exists elsewhere; an object of one's own
tenant below the admin floor (a viewer or member) answers 403.
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Model, QuerySet
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


def deny_out_of_scope(
    model: type[Model], user: Any, object_id: Any, tenant_path: str
) -> NoReturn:
    """Raise for an object outside the user's admin scope: 403 or 404 (see module doc).

    Called only once the object was not found in the admin scope, so a
    superuser (who has no limits) always gets the 404.
    """
    if not user.is_superuser and user.is_authenticated:
        try:
            own_tenant = model._default_manager.filter(
                pk=object_id,
                **{f"{tenant_path}__in": tenant_ids_for(user, min_role=Role.VIEWER)},
            ).exists()
        except (ValueError, TypeError, ValidationError):
            own_tenant = False
        if own_tenant:
            raise PermissionDenied("this needs the admin or owner role in the tenant")
    raise Http404(f"no such {model._meta.verbose_name}")


def gateway_in_admin_scope(user: Any, object_id: Any) -> Gateway:
    """A gateway the user administers; 404 for another tenant's, 403 below admin."""
    try:
        return gateways_for_admin(user).get(pk=object_id)
    except (Gateway.DoesNotExist, ValueError, TypeError, ValidationError):
        deny_out_of_scope(Gateway, user, object_id, "tenant_id")


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


class GatewayListFilter(admin.SimpleListFilter):
    """Filter by gateway, offering only the gateways the user administers.

    Unlike `RelatedOnlyFieldListFilter` it stays applied when it would offer a
    single choice (the gateway page's "Tools" and "Refresh runs" links rely on
    the parameter), and a gateway out of scope simply matches nothing.
    """

    title = "gateway"
    parameter_name = "gateway__id__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        return [
            (g.pk, str(g))
            for g in gateways_for_admin(request.user)
            .select_related(None)
            .only("id", "prefix", "name")
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if not value.isdigit():
            return queryset.none()
        return queryset.filter(gateway_id=int(value))


class TenantScopedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose rows, choices and object pages stay inside the user's tenants.

    `tenant_path` is the lookup from the model to its tenant id. Foreign keys
    to Tenant and Gateway offer only in-scope choices, and every object page
    (change, delete, history, and the extra pages subclasses add through
    `object_in_scope`) answers 404 or 403 for an object out of scope.
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

    def object_in_scope(self, request: HttpRequest, object_id: str) -> Any:
        """The object if the user administers its tenant; else 404 or 403 (module doc)."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            deny_out_of_scope(
                self.model, request.user, unquote(object_id), self.tenant_path
            )
        return obj

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        self.object_in_scope(request, object_id)
        return super().change_view(request, object_id, form_url, extra_context)

    def delete_view(
        self,
        request: HttpRequest,
        object_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        self.object_in_scope(request, object_id)
        return super().delete_view(request, object_id, extra_context)

    def history_view(
        self,
        request: HttpRequest,
        object_id: str,
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        self.object_in_scope(request, object_id)
        return super().history_view(request, object_id, extra_context)
