"""Tool endpoints (SPEC 6): catalog and history (viewer), local edits (member),
approval (admin). Thin adapters over `tools.selectors` and `tools.services`.
"""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from project.api.filters import StrictFilterSet
from project.api.permissions import RoleFloorMixin
from project.api.serializers import ErrorEnvelopeSerializer
from project.api.tenancy import TenantScopedQuerysetMixin
from tools import selectors, services
from tools.models import Tool
from tools.serializers import (
    ToolApproveSerializer,
    ToolRevisionSerializer,
    ToolSerializer,
    ToolUpdateSerializer,
)


class ToolFilter(StrictFilterSet):
    # A plain id, not a model choice: an id of another tenant's gateway must
    # answer exactly like one that does not exist (an empty page, no 422).
    gateway = django_filters.NumberFilter(
        field_name="gateway_id", help_text="Gateway id."
    )
    tenant = django_filters.CharFilter(
        field_name="gateway__tenant__slug", help_text="Tenant slug."
    )
    prefix = django_filters.CharFilter(
        field_name="gateway__prefix", help_text="Gateway prefix."
    )

    class Meta:
        model = Tool
        fields = [
            "gateway",
            "active",
            "name",
            "review_state",
            "effect",
            "gated",
            "tenant",
            "prefix",
        ]


@extend_schema_view(
    list=extend_schema(summary="List tools"),
    retrieve=extend_schema(summary="Read a tool"),
    partial_update=extend_schema(
        summary="Change a tool's locally-owned fields",
        description="Only locally-owned fields (effect, gated, visibility, alias, "
        "tags, jsonpath_filter, admin_notes); any other field is a 422. A refresh "
        "never overwrites them.",
        request=ToolUpdateSerializer,
        responses={200: ToolSerializer},
    ),
)
@extend_schema(tags=["tools"])
class ToolViewSet(
    RoleFloorMixin,
    TenantScopedQuerysetMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """The catalog of the caller's tenants, its revision history and approvals."""

    serializer_class = ToolSerializer
    filterset_class = ToolFilter
    tenant_lookup = "gateway__tenant_id"
    role_floors = {
        "list": "viewer",
        "retrieve": "viewer",
        "revisions": "viewer",
        "partial_update": "member",
        "approve": "admin",
    }

    def get_base_queryset(self) -> QuerySet[Tool]:
        return selectors.tool_list_api()

    def _reread(self, tool: Tool) -> Response:
        return Response(ToolSerializer(self.get_queryset().get(pk=tool.pk)).data)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        tool = self.get_object()
        data = ToolUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.tool_update_local(tool=tool, fields=data.validated_data)
        return self._reread(tool)

    @extend_schema(
        summary="A tool's revisions, newest first",
        responses={200: ToolRevisionSerializer(many=True)},
        filters=False,
    )
    @action(detail=True, methods=["get"], filterset_class=None)
    def revisions(self, request: Request, pk: str | None = None) -> Response:
        tool = self.get_object()
        page = self.paginate_queryset(selectors.tool_revision_list(tool=tool))
        return self.get_paginated_response(ToolRevisionSerializer(page, many=True).data)

    @extend_schema(
        summary="Approve the current revision",
        description="Pins the tool's current revision as approved (SPEC 3.4): "
        "`review_state` becomes `approved` until a refresh writes a newer revision. "
        "Give `revision` to approve only the revision you reviewed.",
        request=ToolApproveSerializer,
        responses={
            200: ToolSerializer,
            409: OpenApiResponse(
                ErrorEnvelopeSerializer,
                description="`revision_mismatch`: the tool moved past the revision "
                "named in the body; nothing was approved.",
            ),
        },
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def approve(self, request: Request, pk: str | None = None) -> Response:
        tool = self.get_object()
        data = ToolApproveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.tool_approve(
            tool=tool, user=request.user, revision=data.validated_data["revision"]
        )
        return self._reread(tool)
