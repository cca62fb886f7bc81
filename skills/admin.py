"""Admin for skills: content as revisions, resolved tool set and status.

Thin: every write goes through `skills.services` (create, new revision,
delete) or the registry (re-validate); scoping comes from
`gateways.admin_scope` like every other admin page.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from gateways.admin_scope import TenantScopedAdmin
from skills.exceptions import SkillInvalid
from skills.models import Skill, SkillRevision
from skills.registry import SkillRefreshResult, SkillRegistry
from skills.services import (
    skill_content_validate,
    skill_create,
    skill_delete,
    skill_revision_create,
)

STATUS_TONES = {
    Skill.Status.OK: "sk-ok",
    Skill.Status.FAILED: "sk-failed",
    Skill.Status.SKIPPED: "sk-skipped",
    Skill.Status.UNKNOWN: "sk-unknown",
}


def _lines(value: str) -> list[str]:
    return [line.strip() for line in (value or "").splitlines() if line.strip()]


def _name_list(names: list[str], missing: set[str] | None = None) -> str:
    if not names:
        return format_html('<span class="sk-unknown sk-badge">{}</span>', "none")
    missing = missing or set()
    return format_html(
        '<ul class="sk-list">{}</ul>',
        format_html_join(
            "",
            '<li class="{}">{}</li>',
            (("sk-missing" if n in missing else "", n) for n in names),
        ),
    )


class SkillForm(forms.ModelForm):
    """Name and tenant on add; the content of the next revision on every save."""

    tools = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "cols": 70}),
        required=False,
        help_text="Qualified tool names (<gateway prefix>__<tool name>), one per line.",
    )
    includes = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 70}),
        required=False,
        help_text="Skills to include (namespace/name), one per line.",
    )

    class Meta:
        model = Skill
        fields = ("tenant", "name")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        revision = self.instance.current_revision if self.instance.pk else None
        if revision is not None:
            self.fields["tools"].initial = "\n".join(revision.tools)
            self.fields["includes"].initial = "\n".join(revision.includes)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        name = data.get("name") or self.instance.name
        try:
            data["tools"], data["includes"] = skill_content_validate(
                name=name,
                tools=_lines(data.get("tools", "")),
                includes=_lines(data.get("includes", "")),
            )
        except SkillInvalid as exc:
            for path, problems in exc.details.items():
                if path == "name" and self.has_error("name"):
                    continue  # the model's own validator already said so
                field = path.split(".", 1)[0]
                field = field if field in self.fields else None
                for problem in problems:
                    line = path.split(".", 1)[1] if "." in path else None
                    text = f"line {int(line) + 1}: {problem}" if line else problem
                    self.add_error(field, text)
        return data


class SkillRevisionInline(admin.TabularInline):
    """Every revision, oldest first; immutable, so read-only."""

    model = SkillRevision
    extra = 0
    can_delete = False
    fields = ("number", "tools_list", "includes_list", "author", "created_at")
    readonly_fields = fields
    ordering = ("number",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Part of the skill page: whoever may see the skill sees its history.
        return True

    def get_queryset(self, request: HttpRequest) -> QuerySet[SkillRevision]:
        return super().get_queryset(request).select_related("author")

    @admin.display(description="tools")
    def tools_list(self, obj: SkillRevision) -> str:
        return _name_list(list(obj.tools))

    @admin.display(description="includes")
    def includes_list(self, obj: SkillRevision) -> str:
        return _name_list(list(obj.includes))


@admin.register(Skill)
class SkillAdmin(TenantScopedAdmin):
    form = SkillForm
    inlines = [SkillRevisionInline]
    list_display = (
        "name",
        "tenant",
        "revision",
        "status_badge",
        "resolved_count",
        "status_changed_at",
    )
    list_filter = ("status", "tenant")
    list_select_related = ("tenant", "current_revision")
    search_fields = ("name",)
    ordering = ("tenant__slug", "name")
    actions = ["revalidate"]

    class Media:
        css = {"all": ["skills/admin.css"]}

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        content = (
            "Next revision" if obj else "Content (revision 1)",
            {"fields": ("tools", "includes")},
        )
        if obj is None:
            return [(None, {"fields": ("tenant", "name")}), content]
        return [
            (None, {"fields": ("tenant", "name", "revision")}),
            (
                "Status",
                {
                    "fields": (
                        "status_badge",
                        "error",
                        "resolved_tools_list",
                        "status_changed_at",
                        "status_run_link",
                    )
                },
            ),
            content,
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        computed = (
            "revision",
            "status_badge",
            "error",
            "resolved_tools_list",
            "status_changed_at",
            "status_run_link",
        )
        return ("tenant", "name", *computed) if obj else computed

    @admin.display(description="revision")
    def revision(self, obj: Skill) -> int:
        return obj.revision_number

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: Skill) -> str:
        return format_html(
            '<span class="sk-badge {}">{}</span>',
            STATUS_TONES.get(obj.status, "sk-unknown"),
            obj.get_status_display(),
        )

    @admin.display(description="tools")
    def resolved_count(self, obj: Skill) -> int:
        return len(obj.resolved_tools or [])

    @admin.display(description="resolved tool set (missing ones marked)")
    def resolved_tools_list(self, obj: Skill) -> str:
        return _name_list(list(obj.resolved_tools or []), set(obj.missing or []))

    @admin.display(description="changed by refresh run")
    def status_run_link(self, obj: Skill) -> str:
        if obj.status_run_id is None:
            return "-"
        url = reverse("admin:refresh_refreshrun_change", args=[obj.status_run_id])
        return format_html('<a href="{}">run {}</a>', url, obj.status_run_id)

    def save_model(
        self, request: HttpRequest, obj: Skill, form: forms.Form, change: bool
    ) -> None:
        tools, includes = form.cleaned_data["tools"], form.cleaned_data["includes"]
        if change:
            skill, created = skill_revision_create(
                skill=obj, tools=tools, includes=includes, author=request.user
            )
            if not created:
                messages.info(
                    request, "Same content as the current revision: none added."
                )
        else:
            skill = skill_create(
                tenant=obj.tenant,
                name=obj.name,
                tools=tools,
                includes=includes,
                author=request.user,
            )
        obj.pk = skill.pk
        obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: Skill) -> None:
        skill_delete(skill=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Skill]) -> None:
        for skill in queryset:
            skill_delete(skill=skill)

    @admin.action(description="Re-validate selected skills", permissions=["change"])
    def revalidate(self, request: HttpRequest, queryset: QuerySet[Skill]) -> None:
        by_tenant: dict[int, set[int]] = defaultdict(set)
        for pk, tenant_id in queryset.values_list("pk", "tenant_id"):
            by_tenant[tenant_id].add(pk)
        result = SkillRefreshResult.merged(
            SkillRegistry(tenant=tenant_id).refresh_ids(ids, scope="admin action")
            for tenant_id, ids in by_tenant.items()
        )
        level = messages.WARNING if result.total_failed else messages.SUCCESS
        self.message_user(request, f"Re-validated: {result.to_summary()}.", level)
