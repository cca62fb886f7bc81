"""Shapes of skills in the API (SPEC 6). Serializers only shape data; rules live in services."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from project.api.serializers import StrictInputSerializer
from skills.models import SKILL_NAME_MAX, TOOL_REF_MAX, Skill, SkillRevision
from skills.services import MAX_INCLUDES, MAX_TOOLS


class SkillSerializer(serializers.ModelSerializer):
    """A skill as it reads back: current revision's content and last computed outcome."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    revision = serializers.SerializerMethodField()
    tools = serializers.SerializerMethodField()
    includes = serializers.SerializerMethodField()

    class Meta:
        model = Skill
        fields = [
            "id",
            "tenant",
            "name",
            "revision",
            "tools",
            "includes",
            "resolved_tools",
            "status",
            "error",
            "missing",
            "status_changed_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_revision(self, obj: Skill) -> int:
        return obj.revision_number

    def get_tools(self, obj: Skill) -> list[str]:
        return list(obj.current_revision.tools) if obj.current_revision else []

    def get_includes(self, obj: Skill) -> list[str]:
        return list(obj.current_revision.includes) if obj.current_revision else []


class SkillRevisionSerializer(serializers.ModelSerializer):
    """One immutable revision."""

    author = serializers.SlugRelatedField(
        slug_field="username",
        read_only=True,
        allow_null=True,
        help_text="Who wrote the revision (null when written by a command or deleted).",
    )

    class Meta:
        model = SkillRevision
        fields = ["number", "tools", "includes", "author", "created_at"]
        read_only_fields = fields


def _names(max_length: int, limit: int, help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(
            max_length=max_length, allow_blank=False, trim_whitespace=False
        ),
        max_length=limit,
        required=False,
        default=list,
        help_text=help_text,
    )


TOOLS_HELP = "Qualified tool names of the tenant: `<gateway prefix>__<tool name>`."
INCLUDES_HELP = "Names (`namespace/name`) of skills of the tenant to include."
TENANT_HELP = (
    "Slug of the tenant; needed only when you hold the role in several tenants."
)


class SkillContentInputSerializer(StrictInputSerializer):
    """`POST /api/skills/{id}/revisions/`: the content of the next revision."""

    tools = _names(TOOL_REF_MAX, MAX_TOOLS, TOOLS_HELP)
    includes = _names(SKILL_NAME_MAX, MAX_INCLUDES, INCLUDES_HELP)


class SkillCreateInputSerializer(SkillContentInputSerializer):
    """`POST /api/skills/`: a new skill at revision 1."""

    name = serializers.CharField(max_length=SKILL_NAME_MAX, trim_whitespace=False)
    tenant = serializers.SlugField(required=False, help_text=TENANT_HELP)


class SkillRefreshInputSerializer(StrictInputSerializer):
    """`POST /api/skills/refresh`: one skill by name, or all of the tenant's."""

    name = serializers.CharField(
        max_length=SKILL_NAME_MAX,
        required=False,
        allow_null=True,
        trim_whitespace=False,
        help_text="A skill name; omit (or null) to refresh every skill of the tenant.",
    )
    tenant = serializers.SlugField(required=False, help_text=TENANT_HELP)


class SkillRefreshResultSerializer(serializers.Serializer):
    """`{refreshed, failed, skipped, summary}` (SPEC 8)."""

    refreshed = serializers.ListField(child=serializers.CharField())
    failed = serializers.DictField(
        child=serializers.CharField(), help_text="Skill name -> why it failed."
    )
    skipped = serializers.ListField(child=serializers.CharField())
    summary = serializers.CharField(help_text="`refreshed: 3, failed: 1, skipped: 0`")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return {
            "refreshed": list(instance.refreshed),
            "failed": dict(instance.failed),
            "skipped": list(instance.skipped),
            "summary": instance.to_summary(),
        }
