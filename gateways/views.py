"""Gateway endpoints (SPEC 6): list and read (viewer), manage (admin), refresh (member).

Thin adapters: they scope to the caller's tenants, validate the body with the
strict serializers and call `gateways.services` / `refresh.services`.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from gateways.models import Gateway
from gateways.serializers import (
    STDIO_ONLY_FIELDS,
    GatewayCreateSerializer,
    GatewaySerializer,
    GatewayUpdateSerializer,
)
from gateways.services import gateway_create, gateway_delete, gateway_update
from project.api.filters import StrictFilterSet
from project.api.permissions import RoleFloorMixin
from project.api.serializers import ErrorEnvelopeSerializer
from project.api.tenancy import TenantScopedQuerysetMixin, tenant_for_write
from refresh.serializers import RefreshRequestSerializer
from refresh.views import refresh_response, refresh_schema


class GatewayFilter(StrictFilterSet):
    tenant = django_filters.CharFilter(
        field_name="tenant__slug", help_text="Tenant slug."
    )

    class Meta:
        model = Gateway
        fields = ["tenant", "prefix", "enabled", "health", "transport", "auth_type"]


def require_superuser_for_stdio(request: Request, data: dict[str, Any]) -> None:
    """stdio gateways run a command on this machine: superusers only (SPEC 2)."""
    touches_stdio = data.get("transport") == Gateway.Transport.STDIO or any(
        name in data for name in STDIO_ONLY_FIELDS
    )
    if touches_stdio and not request.user.is_superuser:
        raise exceptions.PermissionDenied(
            "Only superusers may configure stdio gateways (transport, command, "
            "args, env): they run a command on the server."
        )


_409_DELETE = OpenApiResponse(
    ErrorEnvelopeSerializer,
    description="`gateway_has_catalog`: the gateway has tools, prompts or "
    "resources, which are kept as history (disable it instead); or "
    "`refresh_in_progress`.",
)


@extend_schema_view(
    list=extend_schema(summary="List gateways"),
    retrieve=extend_schema(summary="Read a gateway"),
    create=extend_schema(
        summary="Register a gateway",
        request=GatewayCreateSerializer,
        responses={201: GatewaySerializer},
    ),
    partial_update=extend_schema(
        summary="Change a gateway",
        request=GatewayUpdateSerializer,
        responses={200: GatewaySerializer},
    ),
    destroy=extend_schema(
        summary="Delete a gateway without catalog rows",
        responses={204: None, 409: _409_DELETE},
    ),
)
@extend_schema(tags=["gateways"])
class GatewayViewSet(
    RoleFloorMixin,
    TenantScopedQuerysetMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Gateways (MCP servers) of the caller's tenants.

    Credentials are write-only: `auth_token` / `auth_headers` go in, and only
    `has_credentials` comes out.
    """

    serializer_class = GatewaySerializer
    filterset_class = GatewayFilter
    role_floors = {
        "list": "viewer",
        "retrieve": "viewer",
        "create": "admin",
        "partial_update": "admin",
        "destroy": "admin",
        "refresh": "member",
    }

    def get_base_queryset(self) -> QuerySet[Gateway]:
        return Gateway.objects.select_related("tenant").order_by("tenant_id", "prefix")

    def create(self, request: Request) -> Response:
        data = GatewayCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        tenant = tenant_for_write(request, fields.pop("tenant", None), role="admin")
        require_superuser_for_stdio(request, data.initial_data)
        gateway = gateway_create(tenant=tenant, **fields)
        return Response(GatewaySerializer(gateway).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        gateway = self.get_object()
        data = GatewayUpdateSerializer(gateway, data=request.data)
        data.is_valid(raise_exception=True)
        require_superuser_for_stdio(request, data.initial_data)
        fields = dict(data.validated_data)
        credentials = {
            name: fields.pop(name)
            for name in ("auth_type", "auth_token", "auth_headers")
            if name in fields
        }
        gateway = gateway_update(gateway=gateway, fields=fields, **credentials)
        return Response(GatewaySerializer(gateway).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        gateway_delete(gateway=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @refresh_schema(RefreshRequestSerializer, extra_422="")
    @action(detail=True, methods=["post"], url_path="tools/refresh")
    def refresh(self, request: Request, pk: str | None = None) -> Response:
        """Re-discover the gateway's tools now (a dry run unless `apply`), answer the report."""
        gateway = self.get_object()
        data = RefreshRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return refresh_response(request=request, gateway=gateway, serializer=data)
