"""Admin for tenants, memberships and gateways, with the Refresh button.

Thin: the refresh pages are in `refresh.admin_views`, scoping in
`gateways.admin_scope`, and every write goes through a service.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db import models, transaction
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince, timeuntil

from gateways.admin_scope import REFRESH_PERMISSION, TenantScopedAdmin, can_refresh
from gateways.models import POLICY_FIELDS, ROLE_RANK, Gateway, Membership, Tenant
from gateways.services import GatewayConfigError, gateway_set_credentials
from refresh import admin_views, hooks
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.presentation import counts_text, run_outcome
from refresh.schedule import gateway_reschedule
from refresh.services import refresh_run_create
from tools.models import Tool

admin.site.site_header = "Toolsync"
admin.site.site_title = "Toolsync admin"
admin.site.index_title = "Gateways, tools and their refreshes"

HEALTH_TONES = {
    Gateway.Health.HEALTHY: "ok",
    Gateway.Health.UNREACHABLE: "bad",
    Gateway.Health.UNKNOWN: "muted",
}


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_path = "id"
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A tenant admin cannot mint new tenants; only superusers can.
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


class MembershipForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ("user", "tenant", "role")

    def __init__(self, *args: Any, request_user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_user = request_user

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        user = self.request_user
        tenant, role = data.get("tenant"), data.get("role")
        if user is None or user.is_superuser or tenant is None or role is None:
            return data
        # Nobody grants more than they hold: an admin cannot mint owners.
        mine = (
            Membership.objects.filter(user=user, tenant=tenant)
            .values_list("role", flat=True)
            .first()
        )
        if mine is None or ROLE_RANK[role] > ROLE_RANK[mine]:
            raise forms.ValidationError(
                "You cannot grant a role above your own in this tenant."
            )
        return data


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    form = MembershipForm
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", ("tenant", admin.RelatedOnlyFieldListFilter))
    search_fields = ("user__username", "tenant__slug")
    list_select_related = ("user", "tenant")
    raw_id_fields = ("user",)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        base = super().get_form(request, obj, change, **kwargs)

        class ScopedForm(base):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kw: Any) -> None:
                super().__init__(*args, request_user=request.user, **kw)

        return ScopedForm


class GatewayForm(forms.ModelForm):
    """The gateway fields plus write-only credentials (never rendered back)."""

    # Declared for `assume_scheme`: a bare host means https, as in Django 6.
    url = forms.URLField(
        label="URL",
        max_length=2000,
        required=False,
        assume_scheme="https",
        help_text="The server's MCP endpoint (HTTP transports).",
    )
    auth_token = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Bearer gateways: the token. Write-only; leave empty to keep the "
        "stored one.",
    )
    auth_headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text='Custom-header gateways: a JSON object such as {"X-Api-Key": "…"}. '
        "Write-only; leave empty to keep the stored headers.",
    )

    class Meta:
        model = Gateway
        fields = (
            "tenant",
            "name",
            "prefix",
            "enabled",
            "transport",
            "url",
            "command",
            "args",
            "env",
            "auth_type",
            *POLICY_FIELDS,
        )

    def clean_auth_headers(self) -> dict[str, str] | None:
        raw = self.cleaned_data.get("auth_headers") or ""
        if not raw.strip():
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            raise forms.ValidationError(
                "Enter a JSON object of header names to values."
            ) from None
        if not isinstance(value, dict) or not value:
            raise forms.ValidationError(
                "Enter a JSON object of header names to values."
            )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise forms.ValidationError("Header names and values must be strings.")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        auth_type = data.get("auth_type")
        switching = auth_type != self.initial.get("auth_type") or not self.instance.pk
        missing = {
            Gateway.AuthType.BEARER: ("auth_token", "A bearer gateway needs a token."),
            Gateway.AuthType.HEADERS: ("auth_headers", "Enter the headers to send."),
        }.get(auth_type)
        if missing and switching and not data.get(missing[0]):
            self.add_error(missing[0], missing[1])
        return data


def age_text(when: Any) -> str:
    """`just now` under a minute, else `3 minutes ago`."""
    if (timezone.now() - when).total_seconds() < 60:
        return "just now"
    return f"{timesince(when)} ago"


def time_until_text(when: Any, now: Any) -> str:
    """`42 s` under a minute (timeuntil would say `0 minutes`), else `3 minutes`."""
    seconds = (when - now).total_seconds()
    return f"{max(1, int(seconds))} s" if seconds < 60 else timeuntil(when, now)


def attach_list_facts(gateways: Sequence[Gateway]) -> None:
    """Set `active_tools` and `last_run` (the last finished run) on fetched gateways.

    Two queries whatever the number of rows: one with indexed correlated
    subqueries over the rows shown, one for their last runs. Not in the
    list's own query: PostgreSQL evaluates select-list subqueries for every
    row an OFFSET skips as well, and the last page of 10,000 gateways took
    2.9 s. The runs are read as rows, not as a nested JSON object, because
    SQLite (make run) returns nested JSON as text.
    """
    if not gateways:
        return
    tools = (
        Tool.objects.filter(gateway=OuterRef("pk"), active=True)
        .order_by()
        .values("gateway")
        .annotate(n=Count("*"))
        .values("n")
    )
    last_run = (
        RefreshRun.objects.filter(
            gateway=OuterRef("pk"),
            status__in=[RefreshRun.Status.SUCCEEDED, RefreshRun.Status.FAILED],
        )
        .order_by("-finished_at", "-id")
        .values("id")[:1]
    )
    facts = {
        row["pk"]: row
        for row in Gateway.objects.filter(pk__in=[g.pk for g in gateways])
        .order_by()
        .annotate(
            active_tools=Coalesce(
                Subquery(tools, output_field=IntegerField()), Value(0)
            ),
            last_run_id=Subquery(last_run),
        )
        .values("pk", "active_tools", "last_run_id")
    }
    run_ids = [f["last_run_id"] for f in facts.values() if f["last_run_id"]]
    runs = {
        run.pk: run
        for run in RefreshRun.objects.filter(pk__in=run_ids).only(
            "id", "status", "applied", "complete", "summary", "options", "reason"
        )
    }
    for gateway in gateways:
        row = facts.get(gateway.pk, {})
        gateway.active_tools = row.get("active_tools", 0)  # type: ignore[attr-defined]
        gateway.last_run = runs.get(row.get("last_run_id"))  # type: ignore[attr-defined]


class GatewayChangeList(ChangeList):
    """The gateway list, with each shown row's tool count and last run (one query)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Evaluates the page's queryset; its cached rows are the ones rendered.
        attach_list_facts(list(self.result_list))


def recent_run_row(run: RefreshRun) -> dict[str, Any]:
    """One row of the gateway page's "Recent refreshes" table."""
    label, tone = run_outcome(
        status=run.status,
        applied=run.applied,
        complete=run.complete,
        apply_requested=bool((run.options or {}).get("apply")),
    )
    return {
        "run": run,
        "outcome": label,
        "tone": tone,
        "changes": counts_text(run.summary)
        if run.status == RefreshRun.Status.SUCCEEDED
        else run.reason,
    }


@admin.register(Gateway)
class GatewayAdmin(TenantScopedAdmin):
    """Gateways: health, last refresh and schedule at a glance; Refresh on each page."""

    form = GatewayForm
    formfield_overrides = {
        models.JSONField: {"widget": forms.Textarea(attrs={"rows": 2, "cols": 60})},
    }
    list_display = (
        "prefix",
        "name",
        "tenant",
        "health_badge",
        "last_refresh",
        "tool_count",
        "next_refresh",
    )
    list_display_links = ("prefix", "name")
    list_filter = (
        "health",
        "enabled",
        "transport",
        ("tenant", admin.RelatedOnlyFieldListFilter),
    )
    search_fields = ("prefix", "name", "url")
    list_select_related = ("tenant",)
    actions = ["refresh_selected"]
    readonly_fields = (
        "health",
        "consecutive_failures",
        "last_health_check_at",
        "health_reason",
        "protocol_version",
        "protocol_era",
        "capabilities_display",
        "server_info_display",
        "last_refresh_at",
        "last_refresh_status",
        "last_catalog_complete",
        "next_refresh_at",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("tenant", "name", "prefix", "enabled")}),
        (
            "Connection",
            {
                "fields": (
                    "transport",
                    "url",
                    "command",
                    "args",
                    "env",
                    "auth_type",
                    "auth_token",
                    "auth_headers",
                )
            },
        ),
        (
            "Refresh policy (scheduled and event-driven runs)",
            {
                "fields": (
                    *POLICY_FIELDS,
                    "next_refresh_at",
                )
            },
        ),
        (
            "State",
            {
                "fields": (
                    "health",
                    "consecutive_failures",
                    "last_health_check_at",
                    "health_reason",
                    "last_refresh_at",
                    "last_refresh_status",
                    "last_catalog_complete",
                )
            },
        ),
        (
            "What the server said",
            {
                "classes": ("collapse",),
                "fields": (
                    "protocol_version",
                    "protocol_era",
                    "capabilities_display",
                    "server_info_display",
                    "created_at",
                    "updated_at",
                ),
            },
        ),
    )

    # -- queryset and permissions ------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return GatewayChangeList

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            # SPEC 2: a stdio command runs on our machines; superusers only.
            fields += ["command", "args", "env"]
        return fields

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        if not request.user.is_superuser and "transport" in form.base_fields:
            field = form.base_fields["transport"]
            field.choices = [
                c for c in field.choices if c[0] != Gateway.Transport.STDIO
            ]
        return form

    def has_refresh_permission(self, request: HttpRequest) -> bool:
        user = request.user
        return user.is_superuser or user.has_perm(REFRESH_PERMISSION)

    # -- saving -----------------------------------------------------------------

    def save_model(
        self, request: HttpRequest, obj: Gateway, form: Any, change: bool
    ) -> None:
        data = form.cleaned_data
        token, headers = data.get("auth_token"), data.get("auth_headers")
        auth_changed = "auth_type" in form.changed_data
        if token or headers or auth_changed:
            try:
                gateway_set_credentials(
                    gateway=obj,
                    auth_type=obj.auth_type,
                    auth_token=token or None,
                    auth_headers=headers,
                    save=False,
                )
            except GatewayConfigError as exc:
                # The form checked this; a race with another edit can still land here.
                messages.error(request, f"Credentials not changed: {exc}")
        super().save_model(request, obj, form, change)
        if not change or {"refresh_interval", "enabled"} & set(form.changed_data):
            gateway_reschedule(gateway=obj)

    # -- list columns ---------------------------------------------------------------

    @admin.display(description="Health", ordering="health")
    def health_badge(self, obj: Gateway) -> str:
        tone = HEALTH_TONES.get(obj.health, "muted")
        return format_html(
            '<span class="ts-badge ts-{}" title="{}">{}</span>',
            tone,
            obj.health_reason or obj.get_health_display(),
            obj.get_health_display(),
        )

    @admin.display(description="Last refresh", ordering="last_refresh_at")
    def last_refresh(self, obj: Gateway) -> str:
        run = getattr(obj, "last_run", None)
        refreshing = (
            obj.lease_expires_at is not None and obj.lease_expires_at > timezone.now()
        )
        busy = (
            format_html(' <span class="ts-badge ts-info">{}</span>', "refreshing…")
            if refreshing
            else ""
        )
        if run is None or obj.last_refresh_at is None:
            return format_html('<span class="ts-muted">never</span>{}', busy)
        row = recent_run_row(run)
        counts = row["changes"] if run.status == RefreshRun.Status.SUCCEEDED else ""
        url = reverse("admin:refresh_refreshrun_change", args=[run.pk])
        return format_html(
            '<span class="ts-nowrap"><span class="ts-badge ts-{}">{}</span> '
            '<span class="ts-counts">{}</span></span><br>'
            '<a href="{}" title="{}" class="ts-when">{}</a>{}',
            row["tone"],
            row["outcome"],
            counts,
            url,
            timezone.localtime(obj.last_refresh_at).strftime("%Y-%m-%d %H:%M:%S"),
            age_text(obj.last_refresh_at),
            busy,
        )

    @admin.display(description="Active tools")
    def tool_count(self, obj: Gateway) -> str:
        url = reverse("admin:tools_tool_changelist") + f"?gateway__id__exact={obj.pk}"
        return format_html('<a href="{}">{}</a>', url, getattr(obj, "active_tools", 0))

    @admin.display(description="Next refresh", ordering="next_refresh_at")
    def next_refresh(self, obj: Gateway) -> str:
        if not obj.enabled:
            return format_html('<span class="ts-muted">{}</span>', "disabled")
        every = obj.effective_refresh_interval
        now = timezone.now()
        # Empty or past means the next schedule sweep (every second) takes it.
        if obj.next_refresh_at is None or obj.next_refresh_at <= now:
            return format_html(
                'due now <span class="ts-muted">(every {} s)</span>', every
            )
        return format_html(
            '<span title="{}">in {}</span> <span class="ts-muted">(every {} s)</span>',
            timezone.localtime(obj.next_refresh_at).strftime("%Y-%m-%d %H:%M:%S"),
            time_until_text(obj.next_refresh_at, now),
            every,
        )

    @admin.display(description="Capabilities")
    def capabilities_display(self, obj: Gateway) -> str:
        return format_html(
            '<pre class="ts-json">{}</pre>',
            json.dumps(obj.capabilities, indent=2, sort_keys=True),
        )

    @admin.display(description="Server info")
    def server_info_display(self, obj: Gateway) -> str:
        return format_html(
            '<pre class="ts-json">{}</pre>',
            json.dumps(obj.server_info, indent=2, sort_keys=True),
        )

    # -- actions ------------------------------------------------------------------------

    @admin.action(
        description="Refresh selected gateways now (each by its own policy)",
        permissions=["refresh"],
    )
    def refresh_selected(
        self, request: HttpRequest, queryset: QuerySet[Gateway]
    ) -> None:
        queued, disabled, refused = 0, 0, 0
        for gateway in queryset:
            if not gateway.enabled:
                disabled += 1
                continue
            if gateway.auth_type == Gateway.AuthType.AS_CALLER or not can_refresh(
                request.user, gateway
            ):
                # as_caller needs a credential typed in for the run: preview page only.
                refused += 1
                continue
            run = refresh_run_create(
                gateway=gateway,
                trigger=RefreshRun.Trigger.ADMIN,
                requested_by=request.user,
                options=RefreshOptions(**gateway.policy_options()),
            )
            transaction.on_commit(lambda pk=run.pk: hooks.enqueue_run(pk))
            queued += 1
        parts = [f"Queued {queued} refresh{'es' if queued != 1 else ''}"]
        if disabled:
            parts.append(
                f"{disabled} disabled gateway{'s' if disabled != 1 else ''} skipped"
            )
        if refused:
            parts.append(
                f"{refused} skipped that need a probe credential or a permission "
                "you lack (use the Refresh button on the gateway)"
            )
        level = messages.SUCCESS if queued else messages.WARNING
        self.message_user(
            request,
            "; ".join(parts)
            + ". Results appear under Refresh runs as workers finish them.",
            level,
        )

    # -- refresh pages -------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        custom = [
            path(
                "<path:object_id>/refresh/",
                view(admin_views.RefreshStartView.as_view(model_admin=self)),
                name="gateways_gateway_refresh",
            ),
            path(
                "<path:object_id>/refresh/apply/",
                view(admin_views.RefreshApplyView.as_view(model_admin=self)),
                name="gateways_gateway_refresh_apply",
            ),
            path(
                "<path:object_id>/refresh/<int:run_id>/",
                view(admin_views.RefreshPreviewView.as_view(model_admin=self)),
                name="gateways_gateway_refresh_preview",
            ),
        ]
        return custom + super().get_urls()

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        obj = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if obj is not None:
            attach_list_facts([obj])
            extra["can_refresh"] = can_refresh(request.user, obj)
            extra["needs_probe_credential"] = (
                obj.auth_type == Gateway.AuthType.AS_CALLER
            )
            extra["recent_runs"] = [
                recent_run_row(run)
                for run in RefreshRun.objects.filter(gateway=obj)
                .defer("report")
                .select_related("requested_by")
                .order_by("-queued_at", "-id")[:5]
            ]
            extra["status_strip"] = {
                "health": self.health_badge(obj),
                "tools": self.tool_count(obj),
                "last_refresh": self.last_refresh(obj),
                "next_refresh": self.next_refresh(obj),
            }
        return super().change_view(request, object_id, form_url, extra)
