"""Admin for the catalog: tools with their revisions, diffs and approval.

Server-owned fields are read-only here (a refresh writes them); the form
edits only locally-owned fields, through `tools.services.tool_update_local`.
Approval goes through `tools.services.tool_approve`.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from gateways.admin_scope import GatewayListFilter, TenantScopedAdmin
from refresh.presentation import icon_views, pretty, revision_diff
from tools.models import TOOL_LOCAL_FIELDS, Prompt, Resource, Tool, ToolRevision
from tools.services import (
    ToolRevisionMismatch,
    ToolServiceError,
    tool_approve,
    tool_update_local,
)

REVIEW_TONES = {
    Tool.ReviewState.APPROVED: "ok",
    Tool.ReviewState.PENDING: "warn",
    Tool.ReviewState.CHANGED: "bad",
}
NEEDS_REVIEW = (Tool.ReviewState.PENDING, Tool.ReviewState.CHANGED)


class ToolRevisionInline(admin.TabularInline):
    """The immutable history of a tool, newest first, each with a diff link."""

    model = ToolRevision
    fields = ("number", "created_at", "changed", "run_link", "hash", "compare")
    readonly_fields = fields
    ordering = ("-number",)
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False
    classes = ("ts-revisions",)
    verbose_name_plural = "Revisions (immutable; one per change the server made)"

    def get_queryset(self, request: HttpRequest) -> QuerySet[ToolRevision]:
        return super().get_queryset(request).defer("spec").select_related("tool")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Changed fields")
    def changed(self, obj: ToolRevision) -> str:
        return ", ".join(obj.changed_fields or []) or "—"

    @admin.display(description="Written by")
    def run_link(self, obj: ToolRevision) -> str:
        if obj.refresh_run_id is None:
            return "—"
        url = reverse("admin:refresh_refreshrun_change", args=[obj.refresh_run_id])
        return format_html('<a href="{}">run {}</a>', url, obj.refresh_run_id)

    @admin.display(description="Spec hash")
    def hash(self, obj: ToolRevision) -> str:
        return format_html(
            '<code title="{}">{}</code>', obj.spec_hash, obj.spec_hash[:12]
        )

    @admin.display(description="Diff")
    def compare(self, obj: ToolRevision) -> str:
        if obj.number <= 1:
            return "first revision"
        url = reverse("admin:tools_tool_diff", args=[obj.tool_id])
        return format_html(
            '<a href="{}?a={}&amp;b={}">compare with #{}</a>',
            url,
            obj.number - 1,
            obj.number,
            obj.number - 1,
        )


def _json_display(attr: str, description: str) -> Any:
    """A read-only admin field that shows a JSON value as escaped, indented text."""

    @admin.display(description=description)
    def display(self: Any, obj: Tool) -> str:
        value = getattr(obj, attr)
        if value is None:
            return "—"
        return format_html('<pre class="ts-json">{}</pre>', pretty(value))

    return display


@admin.register(Tool)
class ToolAdmin(TenantScopedAdmin):
    """Tools: effect, gating and review at a glance; approve what changed."""

    tenant_path = "gateway__tenant_id"
    list_display = (
        "name",
        "gateway",
        "effect",
        "gated",
        "review_badge",
        "active",
        "current_revision",
        "updated_at",
    )
    list_filter = (
        GatewayListFilter,
        "review_state",
        "active",
        "effect",
        "gated",
    )
    search_fields = ("name", "title", "description", "alias")
    list_select_related = ("gateway",)
    actions = ["approve_selected"]
    inlines = [ToolRevisionInline]
    formfield_overrides = {
        models.JSONField: {"widget": forms.Textarea(attrs={"rows": 2, "cols": 60})},
        models.TextField: {"widget": forms.Textarea(attrs={"rows": 3, "cols": 60})},
    }
    fieldsets = (
        (None, {"fields": ("gateway", "name", "qualified", "active_state")}),
        (
            "Local settings (a refresh never changes these)",
            {"fields": TOOL_LOCAL_FIELDS},
        ),
        (
            "Review",
            {
                "fields": (
                    "review_badge",
                    "current_revision",
                    "approved_revision_display",
                    "approved_at",
                    "approved_by",
                )
            },
        ),
        (
            "Definition (from the server, read-only)",
            {
                "fields": (
                    "title",
                    "description_display",
                    "input_schema_display",
                    "output_schema_display",
                    "annotations_display",
                    "icons_display",
                    "execution_display",
                    "meta_display",
                    "spec_hash",
                )
            },
        ),
    )
    readonly_fields = (
        "gateway",
        "name",
        "qualified",
        "active_state",
        "review_badge",
        "current_revision",
        "approved_revision_display",
        "approved_at",
        "approved_by",
        "title",
        "description_display",
        "input_schema_display",
        "output_schema_display",
        "annotations_display",
        "icons_display",
        "execution_display",
        "meta_display",
        "spec_hash",
    )

    # -- permissions ------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tools come only from a refresh

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # nothing in the catalog is ever deleted

    def has_approve_permission(self, request: HttpRequest) -> bool:
        user = request.user
        return user.is_superuser or user.has_perm("tools.change_tool")

    # -- saving (locally-owned fields only) ---------------------------------------------

    def save_model(
        self, request: HttpRequest, obj: Tool, form: Any, change: bool
    ) -> None:
        fields = {
            name: form.cleaned_data[name]
            for name in form.changed_data
            if name in TOOL_LOCAL_FIELDS
        }
        if fields:
            tool_update_local(tool=obj, fields=fields)

    # -- displays -------------------------------------------------------------------------

    @admin.display(description="Review", ordering="review_state")
    def review_badge(self, obj: Tool) -> str:
        return format_html(
            '<span class="ts-badge ts-{}">{}</span>',
            REVIEW_TONES.get(obj.review_state, "muted"),
            obj.get_review_state_display(),
        )

    @admin.display(description="Approved revision")
    def approved_revision_display(self, obj: Tool) -> str:
        if obj.approved_revision_id is None:
            return "—"
        number = obj.approved_revision.number
        if number == obj.current_revision:
            return format_html("{} (the current one)", number)
        url = reverse("admin:tools_tool_diff", args=[obj.pk])
        return format_html(
            '{} · <a href="{}?a={}&amp;b={}">compare with the current revision {}</a>',
            number,
            url,
            number,
            obj.current_revision,
            obj.current_revision,
        )

    @admin.display(description="Qualified name")
    def qualified(self, obj: Tool) -> str:
        return obj.qualified_name

    @admin.display(description="Active")
    def active_state(self, obj: Tool) -> str:
        if obj.active:
            return "active"
        return format_html(
            "inactive since {} — {}", obj.deactivated_at, obj.deactivated_reason
        )

    @admin.display(description="Description")
    def description_display(self, obj: Tool) -> str:
        if obj.description is None:
            return "—"
        return format_html('<div class="ts-text">{}</div>', obj.description)

    input_schema_display = _json_display("input_schema", "Input schema")
    output_schema_display = _json_display("output_schema", "Output schema")
    annotations_display = _json_display("annotations", "Annotations")
    execution_display = _json_display("execution", "Execution")
    meta_display = _json_display("meta", "_meta")

    @admin.display(description="Icons")
    def icons_display(self, obj: Tool) -> Any:
        icons = icon_views(obj.icons)
        if not icons:
            return "—"
        return render_to_string("refresh/_icons.html", {"icons": icons})

    # -- actions -------------------------------------------------------------------------

    @admin.action(
        description="Approve the current revision of selected tools",
        permissions=["approve"],
    )
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[Tool]) -> None:
        approved, already, failed = 0, 0, 0
        for tool in queryset:
            if tool.review_state not in NEEDS_REVIEW:
                already += 1
                continue
            try:
                tool_approve(tool=tool, user=request.user)
            except ToolServiceError:
                failed += 1
                continue
            approved += 1
        text = f"Approved {approved} tool{'s' if approved != 1 else ''}"
        if already:
            text += f"; {already} already approved, left as they were"
        if failed:
            text += f"; {failed} had no revision to approve"
        self.message_user(
            request, text + ".", messages.SUCCESS if approved else messages.WARNING
        )

    # -- extra pages ------------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/diff/",
                view(self.diff_view),
                name="tools_tool_diff",
            ),
            path(
                "<path:object_id>/approve/",
                view(require_POST(self.approve_view)),
                name="tools_tool_approve",
            ),
            *super().get_urls(),
        ]

    def _tool_or_deny(self, request: HttpRequest, object_id: str) -> Tool:
        tool = self.object_in_scope(request, object_id)
        if not self.has_view_permission(request, tool):
            raise PermissionDenied("you may not view tools")
        return tool

    def diff_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Two revisions of a tool side by side (`?a=<number>&b=<number>`)."""
        tool = self._tool_or_deny(request, object_id)
        numbers = list(
            ToolRevision.objects.filter(tool=tool)
            .order_by("number")
            .values_list("number", flat=True)
        )
        if not numbers:
            raise Http404("this tool has no revisions")
        default_b = (
            tool.current_revision if tool.current_revision in numbers else numbers[-1]
        )
        b = _number(request.GET.get("b"), default_b)
        # Without `a`: what a reviewer compares against, the approved revision,
        # else the one before `b`.
        approved = tool.approved_revision.number if tool.approved_revision_id else None
        a = _number(
            request.GET.get("a"),
            approved if approved and approved != b else max(1, b - 1),
        )
        revisions = {
            r.number: r
            for r in ToolRevision.objects.filter(
                tool=tool, number__in=[a, b]
            ).select_related("refresh_run")
        }
        if a not in revisions or b not in revisions:
            raise Http404("no such revision")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": tool,
            "tool": tool,
            "title": f"{tool.name}: revision {a} → {b}",
            "left": revisions[a],
            "right": revisions[b],
            "numbers": numbers,
            "fields": revision_diff(revisions[a].spec, revisions[b].spec),
            "approved_number": approved,
            "has_view_permission": True,
            "can_approve_shown": b == tool.current_revision
            and tool.review_state in NEEDS_REVIEW
            and self.has_approve_permission(request),
        }
        return TemplateResponse(request, "admin/tools/tool/revision_diff.html", context)

    def approve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: approve the tool's current revision (the button on its page)."""
        tool = self._tool_or_deny(request, object_id)
        if not self.has_approve_permission(request):
            raise PermissionDenied("you may not approve tools")
        change_url = reverse("admin:tools_tool_change", args=[tool.pk])
        if tool.review_state not in NEEDS_REVIEW:
            messages.info(request, "This tool's current revision is already approved.")
            return HttpResponseRedirect(change_url)
        # The revision the reviewer was shown: a refresh that wrote a newer
        # one in between must not get it approved unread.
        seen = request.POST.get("revision", "")
        if not seen.isdigit():
            messages.error(
                request, "Not approved: the request did not say which revision."
            )
            return HttpResponseRedirect(change_url)
        try:
            approved = tool_approve(tool=tool, user=request.user, revision=int(seen))
        except ToolRevisionMismatch as exc:
            messages.warning(
                request,
                f"Not approved: the server changed this tool while you were reading "
                f"it; revision {exc.current} is current now. Review it, then approve.",
            )
            return HttpResponseRedirect(change_url)
        except ToolServiceError as exc:
            messages.error(request, f"Not approved: {exc}.")
            return HttpResponseRedirect(change_url)
        messages.success(
            request, f"Approved revision {approved.current_revision} of {tool.name}."
        )
        return HttpResponseRedirect(change_url)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        extra = dict(extra_context or {})
        tool = self.get_object(request, object_id)
        if tool is not None:
            extra["needs_review"] = tool.review_state in NEEDS_REVIEW
            extra["can_approve"] = self.has_approve_permission(request)
            if (
                tool.review_state == Tool.ReviewState.CHANGED
                and tool.approved_revision_id
            ):
                current = ToolRevision.objects.filter(
                    tool=tool, number=tool.current_revision
                ).first()
                if current is not None:
                    extra["since_approval"] = [
                        f
                        for f in revision_diff(
                            tool.approved_revision.spec, current.spec
                        )
                        if f.changed
                    ]
                    extra["approved_number"] = tool.approved_revision.number
        return super().change_view(request, object_id, form_url, extra)


def _number(raw: str | None, default: int) -> int:
    return int(raw) if raw and raw.isdigit() else default


class _CatalogEntryAdmin(TenantScopedAdmin):
    """Prompts and resources: read-only lists (a refresh writes them)."""

    tenant_path = "gateway__tenant_id"
    list_select_related = ("gateway",)
    list_filter = (GatewayListFilter, "active")
    readonly_fields = (
        "gateway",
        "spec_display",
        "spec_hash",
        "active",
        "deactivated_at",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Spec")
    def spec_display(self, obj: Any) -> str:
        return format_html('<pre class="ts-json">{}</pre>', pretty(obj.spec))


@admin.register(Prompt)
class PromptAdmin(_CatalogEntryAdmin):
    list_display = ("name", "gateway", "active", "updated_at")
    search_fields = ("name",)
    fields = ("name", *_CatalogEntryAdmin.readonly_fields)


@admin.register(Resource)
class ResourceAdmin(_CatalogEntryAdmin):
    list_display = ("uri", "name", "gateway", "active", "updated_at")
    search_fields = ("uri", "name")
    fields = ("uri", "name", *_CatalogEntryAdmin.readonly_fields)
