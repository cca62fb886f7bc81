"""Refresh endpoints: refresh a gateway (by id or by prefix) and read run history.

Views are thin: they scope and check the caller, validate the body and call
`refresh.services.refresh_gateway`, which runs the refresh synchronously
and records it as a RefreshRun with trigger `api`. Its `RefreshError`s map to
the error envelope in `project.api.errors`.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Count
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gateways.models import Gateway
from project.api.errors import ApiError
from project.api.filters import StrictFilterSet
from project.api.permissions import RoleFloor, RoleFloorMixin, require_role
from project.api.serializers import ErrorEnvelopeSerializer
from project.api.tenancy import TenantScopedQuerysetMixin, tenant_ids
from refresh.models import RefreshRun
from refresh.serializers import (
    PrefixRefreshRequestSerializer,
    RefreshRequestSerializer,
    RefreshRunListSerializer,
    RefreshRunSerializer,
    ToolRefreshReportSerializer,
)
from refresh.services import refresh_gateway
from tools.models import Tool

_REPORT_EXAMPLE = {
    "run_id": 42,
    "gateway_id": 7,
    "prefix": "crm",
    "source": "https://crm.example.com/mcp",
    "trigger": "api",
    "applied": False,
    "complete": True,
    "protocol_version": "2025-11-25",
    "duration_ms": 183,
    "summary": {
        "added": 1,
        "updated": 1,
        "unchanged": 40,
        "returning": 0,
        "disappeared": 1,
        "skipped": 1,
        "deactivated": 0,
        "reactivated": 0,
    },
    "items": [
        {
            "name": "create_invoice",
            "change": "added",
            "changed_fields": [],
            "before": None,
            "after": {
                "name": "create_invoice",
                "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": False},
            },
            "effect_hint": "write",
            "effect": None,
            "effect_after": "write",
            "action": "create",
            "requires_review": False,
            "referenced_by": [],
        },
        {
            "name": "search_contacts",
            "change": "updated",
            "changed_fields": ["description"],
            "before": {"description": "Search contacts."},
            "after": {"description": "Search contacts by name or e-mail."},
            "effect_hint": "read",
            "effect": "write",
            "effect_after": "write",
            "action": "update",
            "requires_review": True,
            "referenced_by": [],
        },
        {
            "name": "legacy_export",
            "change": "disappeared",
            "changed_fields": [],
            "before": {"name": "legacy_export"},
            "after": None,
            "effect_hint": None,
            "effect": "write",
            "effect_after": "write",
            "action": "leave_active",
            "requires_review": False,
            "referenced_by": ["sales/reporting@3"],
        },
    ],
    "skipped": [{"name": "bad name!", "reason": "name outside [A-Za-z0-9_.-]"}],
    "note": "Dry run: 1 added, 1 updated and 1 disappeared (1 entry skipped as "
    "invalid); nothing in the catalog was written because apply was not requested.",
}

_ERROR_EXAMPLES = {
    409: {
        "error": {
            "code": "refresh_in_progress",
            "message": "a refresh of this gateway is already running (run 41)",
            "details": {"run_id": 42, "running_run_id": 41},
        }
    },
    422: {
        "error": {
            "code": "gateway_disabled",
            "message": "the gateway is disabled",
            "details": {"run_id": 42},
        }
    },
    502: {
        "error": {
            "code": "gateway_unreachable",
            "message": "cannot connect to the server: connection refused",
            "details": {"run_id": 42, "probe_error": "connect_failed"},
        }
    },
}


def refresh_schema(
    request_serializer: type, *, extra_422: str, by_prefix: bool = False
) -> Any:
    """The OpenAPI description shared by both refresh endpoints."""
    named = {"prefix": "crm"} if by_prefix else {}
    return extend_schema(
        request=request_serializer,
        responses={
            200: OpenApiResponse(
                ToolRefreshReportSerializer,
                description="The report. A catalog read only in part is still 200, "
                "with `complete: false` and `incomplete_reason`.",
            ),
            409: OpenApiResponse(
                ErrorEnvelopeSerializer,
                description="`refresh_in_progress`: another refresh of this gateway "
                "is running; `details.running_run_id` names it, `details.run_id` the "
                "run recorded as skipped.",
            ),
            422: OpenApiResponse(
                ErrorEnvelopeSerializer,
                description="`validation_error` (field paths in `details.errors`, "
                "unknown fields rejected), `gateway_disabled`, "
                f"`probe_credential_required`{extra_422}.",
            ),
            500: OpenApiResponse(
                ErrorEnvelopeSerializer,
                description="`refresh_failed` (e.g. stored credentials cannot be "
                "decrypted) or `server_error`; the run is recorded failed.",
            ),
            502: OpenApiResponse(
                ErrorEnvelopeSerializer,
                description="`gateway_unreachable`: the server could not be reached "
                "or initialized; nothing was written, the run (`details.run_id`) is "
                "recorded failed with its reason.",
            ),
        },
        examples=[
            OpenApiExample(
                "Dry run",
                value={**named, "apply": False},
                request_only=True,
            ),
            OpenApiExample(
                "Apply, deactivating what disappeared",
                value={**named, "apply": True, "deactivate_missing": True},
                request_only=True,
            ),
            OpenApiExample("Report", value=_REPORT_EXAMPLE, response_only=True),
            *[
                OpenApiExample(
                    body["error"]["code"],
                    value=body,
                    response_only=True,
                    status_codes=[str(code)],
                )
                for code, body in _ERROR_EXAMPLES.items()
            ],
        ],
        tags=["refresh"],
    )


def refresh_response(
    *, request: Request, gateway: Gateway, serializer: RefreshRequestSerializer
) -> Response:
    """Run the refresh now (trigger `api`) and answer its report."""
    run = refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.API,
        requested_by=request.user,
        options=serializer.options(),
        probe_credential=serializer.validated_data.get("probe_credential"),
    )
    return Response(run.report)


class ToolsRefreshView(APIView):
    """`POST /api/tools/refresh`: refresh the gateway whose imported tools a prefix names.

    422 when the prefix names no imported tool row among the caller's tenants,
    when its rows belong to two different servers (the same prefix in two of
    the caller's tenants: use `/api/gateways/{id}/tools/refresh`), or when the
    gateway authenticates as the caller and no `probe_credential` was given.
    403 below the member floor in the gateway's tenant.
    """

    permission_classes = [RoleFloor("member")]

    @refresh_schema(
        PrefixRefreshRequestSerializer,
        extra_422=", `prefix_not_imported` (no imported tool has this prefix), "
        "`prefix_ambiguous` (its tools belong to two servers)",
        by_prefix=True,
    )
    def post(self, request: Request) -> Response:
        serializer = PrefixRefreshRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        gateway = gateway_for_prefix(request, serializer.validated_data["prefix"])
        require_role(request, gateway.tenant_id, "member")
        if (
            gateway.auth_type == Gateway.AuthType.AS_CALLER
            and not serializer.validated_data.get("probe_credential")
        ):
            raise ApiError(
                "this gateway authenticates as the caller; give a probe_credential",
                code="probe_credential_required",
                status_code=422,
                details={"errors": [_field_error("probe_credential", "required")]},
            )
        return refresh_response(request=request, gateway=gateway, serializer=serializer)


def _field_error(field: str, code: str) -> dict[str, str]:
    return {"field": field, "code": code, "message": "This field is required."}


def gateway_for_prefix(request: Request, prefix: str) -> Gateway:
    """The one gateway whose imported tool rows carry `prefix` (Cobre rules)."""
    servers = list(
        Tool.objects.filter(
            gateway__prefix=prefix, gateway__tenant_id__in=tenant_ids(request)
        )
        .values("gateway_id")
        .annotate(n=Count("id"))
        .order_by("gateway_id")[:2]
    )
    if not servers:
        raise ApiError(
            f"the prefix {prefix!r} names no imported tool; register the gateway "
            "and refresh it by id first (POST /api/gateways/{id}/tools/refresh)",
            code="prefix_not_imported",
            status_code=422,
            details={"errors": [_prefix_error("prefix_not_imported")]},
        )
    if len(servers) > 1:
        raise ApiError(
            f"the prefix {prefix!r} names tools of two different servers; refresh "
            "by gateway id instead (POST /api/gateways/{id}/tools/refresh)",
            code="prefix_ambiguous",
            status_code=422,
            details={
                "errors": [_prefix_error("prefix_ambiguous")],
                "gateway_ids": [s["gateway_id"] for s in servers],
            },
        )
    return Gateway.objects.select_related("tenant").get(pk=servers[0]["gateway_id"])


def _prefix_error(code: str) -> dict[str, str]:
    messages = {
        "prefix_not_imported": "No imported tool has this prefix.",
        "prefix_ambiguous": "This prefix names tools of two different servers.",
    }
    return {"field": "prefix", "code": code, "message": messages[code]}


class RefreshRunFilter(StrictFilterSet):
    # A plain id, not a model choice: an id of another tenant's gateway must
    # answer exactly like one that does not exist (an empty page, no 422).
    gateway = django_filters.NumberFilter(
        field_name="gateway_id", help_text="Gateway id."
    )

    class Meta:
        model = RefreshRun
        fields = ["gateway", "status", "trigger", "applied"]


@extend_schema(tags=["refresh"])
class RefreshRunViewSet(
    RoleFloorMixin, TenantScopedQuerysetMixin, viewsets.ReadOnlyModelViewSet
):
    """Refresh run history (newest first). Lists leave out the report; read a run for it."""

    tenant_lookup = "gateway__tenant_id"
    role_floors = {"list": "viewer", "retrieve": "viewer"}
    filterset_class = RefreshRunFilter

    def get_base_queryset(self) -> Any:
        qs = RefreshRun.objects.select_related("requested_by").order_by(
            "-queued_at", "-id"
        )
        if self.action == "list":
            qs = qs.defer("report")
        return qs

    def get_serializer_class(self) -> type:
        return (
            RefreshRunListSerializer if self.action == "list" else RefreshRunSerializer
        )
