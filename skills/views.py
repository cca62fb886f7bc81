"""Skills endpoints (SPEC 6, 8): thin adapters over `skills.services` and the registry."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from project.api.errors import ApiError
from project.api.pagination import PageNumberPagination
from project.api.permissions import RoleFloorMixin
from project.api.tenancy import TenantScopedQuerysetMixin, tenant_for_write
from skills import selectors, services
from skills.exceptions import SkillError, SkillInvalid
from skills.models import Skill
from skills.registry import SkillRegistry
from skills.serializers import (
    SkillContentInputSerializer,
    SkillCreateInputSerializer,
    SkillRefreshInputSerializer,
    SkillRefreshResultSerializer,
    SkillRevisionSerializer,
    SkillSerializer,
)


def _as_api_error(exc: SkillError) -> exceptions.APIException:
    if isinstance(exc, SkillInvalid):
        return exceptions.ValidationError(
            {path: list(messages) for path, messages in exc.details.items()}
        )
    return ApiError(
        exc.message, code=exc.code, status_code=exc.status, details=exc.details
    )


@extend_schema(tags=["skills"])
class SkillViewSet(
    TenantScopedQuerysetMixin,
    RoleFloorMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Skills of the caller's tenants: list and read (viewer), create and revise
    (admin), refresh (member)."""

    serializer_class = SkillSerializer
    pagination_class = PageNumberPagination
    role_floors = {
        "list": "viewer",
        "retrieve": "viewer",
        "revisions": "viewer",
        "create": "admin",
        "add_revision": "admin",
        "refresh": "member",
    }

    def get_base_queryset(self) -> QuerySet[Skill]:
        qs = selectors.skill_list()
        params = self.request.query_params
        if params.get("name"):
            qs = qs.filter(name=params["name"])
        if params.get("namespace"):
            qs = qs.filter(name__startswith=f"{params['namespace']}/")
        if params.get("status"):
            qs = qs.filter(status=params["status"])
        if params.get("tenant"):
            qs = qs.filter(tenant__slug=params["tenant"])
        return qs

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, SkillError):
            exc = _as_api_error(exc)
        return super().handle_exception(exc)

    @extend_schema(
        parameters=[
            OpenApiParameter("name", str, description="Exact skill name."),
            OpenApiParameter("namespace", str, description="Skills in this namespace."),
            OpenApiParameter(
                "status",
                str,
                enum=[s.value for s in Skill.Status],
                description="Outcome.",
            ),
            OpenApiParameter("tenant", str, description="Tenant slug."),
        ]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=SkillCreateInputSerializer, responses={201: SkillSerializer})
    def create(self, request: Request) -> Response:
        """Create a skill at revision 1; its status is computed at once."""
        data = SkillCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = tenant_for_write(
            request, data.validated_data.get("tenant"), role="admin"
        )
        skill = services.skill_create(
            tenant=tenant,
            name=data.validated_data["name"],
            tools=data.validated_data["tools"],
            includes=data.validated_data["includes"],
            author=request.user,
        )
        skill = selectors.skill_list().get(pk=skill.pk)
        return Response(SkillSerializer(skill).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: SkillRevisionSerializer(many=True)})
    def revisions(self, request: Request, pk: str | None = None) -> Response:
        """Every revision of the skill, newest first."""
        skill = self.get_object()
        page = self.paginate_queryset(selectors.skill_revision_list(skill=skill))
        return self.get_paginated_response(
            SkillRevisionSerializer(page, many=True).data
        )

    @extend_schema(
        request=SkillContentInputSerializer,
        responses={201: SkillSerializer, 200: SkillSerializer},
    )
    def add_revision(self, request: Request, pk: str | None = None) -> Response:
        """Add the next revision (201); the same content as the current one writes nothing (200)."""
        skill = self.get_object()
        data = SkillContentInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        skill, created = services.skill_revision_create(
            skill=skill,
            tools=data.validated_data["tools"],
            includes=data.validated_data["includes"],
            author=request.user,
        )
        skill = selectors.skill_list().get(pk=skill.pk)
        return Response(
            SkillSerializer(skill).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        request=SkillRefreshInputSerializer,
        responses={200: SkillRefreshResultSerializer},
    )
    def refresh(self, request: Request) -> Response:
        """Recompute and validate one skill (`name`) or all of the tenant's."""
        data = SkillRefreshInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = tenant_for_write(
            request, data.validated_data.get("tenant"), role="member"
        )
        registry = SkillRegistry(tenant=tenant)
        name = data.validated_data.get("name")
        result = registry.refresh(name) if name else registry.refresh_all()
        return Response(SkillRefreshResultSerializer(result).data)
