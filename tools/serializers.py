"""Tool shapes for the API (SPEC 6): the catalog row, its revisions, local edits.

Server-owned values keep MCP's camelCase keys inside their JSON; the field
names outside are snake_case. Serializers shape data; `tools.services` holds
the rules (only locally-owned fields change, approval pins a revision).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gateways.models import Gateway
from project.api.serializers import StrictInputSerializer
from tools.models import Tool, ToolRevision

MAX_TAGS = 50
MAX_TAG_CHARS = 64
MAX_NOTES_CHARS = 10_000


def _no_control_chars(value: str) -> str:
    if any((ord(c) < 0x20 and c not in "\n\t") or ord(c) == 0x7F for c in value):
        raise serializers.ValidationError(
            "Must not contain control characters.", code="control_characters"
        )
    return value


class ToolSerializer(serializers.ModelSerializer):
    """A tool as it reads back: server-owned, locally-owned and derived fields."""

    qualified_name = serializers.SerializerMethodField(
        help_text="`<gateway prefix><separator><name>`: the name clients call."
    )
    revision = serializers.IntegerField(
        source="current_revision", read_only=True, help_text="Current revision number."
    )
    approved_revision = serializers.IntegerField(
        source="approved_revision_number",
        read_only=True,
        allow_null=True,
        default=None,
        help_text="The revision an admin last approved (null: never approved).",
    )
    transport = serializers.ChoiceField(
        choices=Gateway.Transport.choices,
        source="gateway_transport",
        read_only=True,
        help_text="Follows the gateway.",
    )
    auth_type = serializers.ChoiceField(
        choices=Gateway.AuthType.choices,
        source="gateway_auth_type",
        read_only=True,
        help_text="Follows the gateway.",
    )
    input_schema = serializers.JSONField(read_only=True)
    output_schema = serializers.JSONField(read_only=True, allow_null=True)
    annotations = serializers.JSONField(read_only=True, allow_null=True)
    icons = serializers.JSONField(read_only=True, allow_null=True)
    execution = serializers.JSONField(read_only=True, allow_null=True)
    meta = serializers.JSONField(
        read_only=True, allow_null=True, help_text="The tool's `_meta`."
    )
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Tool
        fields = [
            "id",
            "gateway",
            "name",
            "qualified_name",
            # server-owned
            "title",
            "description",
            "input_schema",
            "output_schema",
            "annotations",
            "icons",
            "execution",
            "meta",
            "spec_hash",
            "revision",
            # review (definition pinning)
            "review_state",
            "approved_revision",
            "approved_at",
            # locally-owned
            "effect",
            "gated",
            "visibility",
            "alias",
            "tags",
            "jsonpath_filter",
            "admin_notes",
            # derived
            "transport",
            "auth_type",
            "active",
            "deactivated_at",
            "deactivated_reason",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField())
    def get_qualified_name(self, obj: Tool) -> str:
        # `gateway_prefix` comes from `tools.selectors.tool_list_api`.
        return f"{obj.gateway_prefix}{settings.TOOLSYNC_TOOL_SEPARATOR}{obj.name}"


class ToolUpdateSerializer(StrictInputSerializer):
    """`PATCH /api/tools/{id}/`: locally-owned fields only; a refresh never overwrites them."""

    effect = serializers.ChoiceField(choices=Tool._meta.get_field("effect").choices)
    gated = serializers.BooleanField()
    visibility = serializers.ChoiceField(choices=Tool.Visibility.choices)
    alias = serializers.CharField(
        max_length=200, allow_blank=True, validators=[_no_control_chars]
    )
    tags = serializers.ListField(
        child=serializers.CharField(
            max_length=MAX_TAG_CHARS, validators=[_no_control_chars]
        ),
        max_length=MAX_TAGS,
    )
    jsonpath_filter = serializers.CharField(
        max_length=500, allow_blank=True, validators=[_no_control_chars]
    )
    admin_notes = serializers.CharField(
        max_length=MAX_NOTES_CHARS,
        allow_blank=True,
        trim_whitespace=False,
        validators=[_no_control_chars],
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("partial", True)
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.required = False

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError(
                "Give at least one locally-owned field to change.", code="empty"
            )
        return attrs


class ToolApproveSerializer(StrictInputSerializer):
    """`POST /api/tools/{id}/approve`: optionally name the revision reviewed."""

    revision = serializers.IntegerField(
        min_value=1,
        required=False,
        allow_null=True,
        default=None,
        help_text="The revision number you reviewed. When given and the tool has "
        "moved on since, nothing is approved (409 `revision_mismatch`).",
    )


class ToolRevisionSerializer(serializers.ModelSerializer):
    """One immutable snapshot of the server-owned spec (MCP wire form)."""

    spec = serializers.JSONField(read_only=True)
    changed_fields = serializers.ListField(
        child=serializers.CharField(), read_only=True
    )

    class Meta:
        model = ToolRevision
        fields = [
            "number",
            "spec",
            "spec_hash",
            "changed_fields",
            "refresh_run",
            "created_at",
        ]
        read_only_fields = fields
