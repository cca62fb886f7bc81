"""Admin for refresh runs: a read-only history that renders each stored report.

The change page renders the report through `refresh/_report.html`, the same
template as the preview, so a run reads the same before and after apply.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from gateways.admin_scope import GatewayListFilter, TenantScopedAdmin, can_refresh
from refresh.admin_views import is_previewable
from refresh.models import RefreshRun
from refresh.presentation import counts_text, pretty, report_view, run_outcome

Status = RefreshRun.Status


class OutcomeFilter(admin.SimpleListFilter):
    """What a run came to: applied, dry run, refused as stale, incomplete, failed, …"""

    title = "outcome"
    parameter_name = "outcome"

    LOOKUPS: dict[str, Q] = {
        "applied": Q(status=Status.SUCCEEDED, applied=True),
        "dry_run": Q(status=Status.SUCCEEDED, applied=False, options__apply=False),
        "stale_preview": Q(status=Status.SUCCEEDED, applied=False, options__apply=True),
        "incomplete": Q(status=Status.SUCCEEDED, complete=False),
        "failed": Q(status=Status.FAILED),
        "skipped": Q(status=Status.SKIPPED),
        "in_progress": Q(status__in=[Status.QUEUED, Status.RUNNING]),
    }
    LABELS = {
        "applied": "Applied",
        "dry_run": "Dry run (preview)",
        "stale_preview": "Not applied: server changed",
        "incomplete": "Incomplete catalog",
        "failed": "Failed",
        "skipped": "Skipped",
        "in_progress": "Queued or running",
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(self.LABELS.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        condition = self.LOOKUPS.get(self.value() or "")
        return queryset.filter(condition) if condition is not None else queryset


@admin.register(RefreshRun)
class RefreshRunAdmin(TenantScopedAdmin):
    """Every refresh attempt, read-only, filterable by gateway, trigger and outcome."""

    tenant_path = "gateway__tenant_id"
    list_display = (
        "run_id",
        "gateway",
        "trigger",
        "outcome_badge",
        "counts",
        "queued",
        "duration",
        "requested_by",
    )
    list_display_links = ("run_id",)
    list_filter = (
        OutcomeFilter,
        "trigger",
        "status",
        GatewayListFilter,
    )
    list_select_related = ("gateway", "requested_by")
    search_fields = ("gateway__prefix", "gateway__name", "reason")
    date_hierarchy = "queued_at"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "gateway_link",
                    ("trigger", "requested_by"),
                    "outcome_badge",
                    "reason",
                    ("finished_at", "duration"),
                )
            },
        ),
        (
            "Details",
            {
                "classes": ("collapse",),
                "fields": (
                    ("status", "error_code"),
                    ("applied", "complete"),
                    "options_display",
                    ("queued_at", "started_at"),
                    "catalog_fingerprint",
                ),
            },
        ),
    )
    readonly_fields = (
        "gateway_link",
        "trigger",
        "requested_by",
        "status",
        "outcome_badge",
        "reason",
        "error_code",
        "applied",
        "complete",
        "options_display",
        "queued_at",
        "started_at",
        "finished_at",
        "duration",
        "catalog_fingerprint",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[RefreshRun]:
        # Reports can be megabytes; the list never needs them.
        return super().get_queryset(request).defer("report")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Run", ordering="id")
    def run_id(self, obj: RefreshRun) -> str:
        return f"#{obj.pk}"

    @admin.display(description="Gateway")
    def gateway_link(self, obj: RefreshRun) -> str:
        url = reverse("admin:gateways_gateway_change", args=[obj.gateway_id])
        return format_html('<a href="{}">{}</a>', url, obj.gateway)

    @admin.display(description="Outcome")
    def outcome_badge(self, obj: RefreshRun) -> str:
        label, tone = run_outcome(
            status=obj.status,
            applied=obj.applied,
            complete=obj.complete,
            apply_requested=bool((obj.options or {}).get("apply")),
        )
        return format_html('<span class="ts-badge ts-{}">{}</span>', tone, label)

    @admin.display(description="Changes")
    def counts(self, obj: RefreshRun) -> str:
        if obj.status != Status.SUCCEEDED:
            return format_html('<span class="ts-muted">{}</span>', obj.reason[:120])
        return format_html(
            '<span class="ts-counts">{}</span>', counts_text(obj.summary)
        )

    @admin.display(description="Queued", ordering="queued_at")
    def queued(self, obj: RefreshRun) -> str:
        return format_html(
            '<span class="ts-nowrap">{}</span>',
            timezone.localtime(obj.queued_at).strftime("%Y-%m-%d %H:%M:%S"),
        )

    @admin.display(description="Duration", ordering="duration_ms")
    def duration(self, obj: RefreshRun) -> str:
        return "—" if obj.duration_ms is None else f"{obj.duration_ms} ms"

    @admin.display(description="Options")
    def options_display(self, obj: RefreshRun) -> str:
        return format_html('<pre class="ts-json">{}</pre>', pretty(obj.options or {}))

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<path:object_id>/report.json",
                self.admin_site.admin_view(self.report_json_view),
                name="refresh_refreshrun_report",
            ),
            *super().get_urls(),
        ]

    def report_json_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The stored report as JSON (SPEC 6 shape): megabytes are not inlined."""
        run = self.object_in_scope(request, object_id)
        if not self.has_view_permission(request, run):
            raise PermissionDenied("you may not view refresh runs")
        response = JsonResponse(run.report or {}, json_dumps_params={"indent": 2})
        response["Content-Disposition"] = (
            f'inline; filename="refresh-run-{run.pk}.json"'
        )
        return response

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        extra = dict(extra_context or {})
        run = self.get_object(request, object_id)
        if run is not None:
            label, _tone = run_outcome(
                status=run.status,
                applied=run.applied,
                complete=run.complete,
                apply_requested=bool((run.options or {}).get("apply")),
            )
            extra["title"] = f"Refresh run {run.pk} of {run.gateway.prefix}"
            extra["subtitle"] = f"{run.get_trigger_display()} · {label}"
            extra["report"] = report_view(run.report)
            extra["run"] = run
            if is_previewable(run) and can_refresh(request.user, run.gateway):
                extra["preview_url"] = reverse(
                    "admin:gateways_gateway_refresh_preview",
                    args=[run.gateway_id, run.pk],
                )
        return super().change_view(request, object_id, form_url, extra)
