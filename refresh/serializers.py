"""Refresh shapes for the API: the request bodies, the report, refresh runs."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from project.api.serializers import StrictCharField, StrictInputSerializer
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.report import SUMMARY_KEYS
from tools.models import Effect


def _no_control_chars(value: str) -> str:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise serializers.ValidationError(
            "Must not contain control characters.", code="control_characters"
        )
    return value


class RefreshRequestSerializer(StrictInputSerializer):
    """Body of `POST /api/gateways/{id}/tools/refresh` (SPEC 6). A dry run by default."""

    apply = serializers.BooleanField(
        default=False, help_text="Write the changes; false (default) is a dry run."
    )
    apply_effect = serializers.BooleanField(
        default=False, help_text="Let server hints change tools' effect (SPEC 3.4)."
    )
    deactivate_missing = serializers.BooleanField(
        default=False,
        help_text="Deactivate tools the server no longer offers (complete catalogs only).",
    )
    reactivate_returning = serializers.BooleanField(
        default=False, help_text="Reactivate inactive tools the server offers again."
    )
    include_prompts = serializers.BooleanField(
        default=False, help_text="Also refresh prompts."
    )
    include_resources = serializers.BooleanField(
        default=False, help_text="Also refresh resources."
    )
    probe_credential = StrictCharField(
        min_length=1,
        max_length=100,
        allow_null=True,
        required=False,
        default=None,
        write_only=True,
        trim_whitespace=False,
        validators=[_no_control_chars],
        help_text="For `as_caller` gateways: sent as `Authorization: Bearer <credential>` "
        "for this run only; never stored, logged or echoed.",
    )

    def options(self) -> RefreshOptions:
        data = self.validated_data
        return RefreshOptions(
            apply=data["apply"],
            apply_effect=data["apply_effect"],
            deactivate_missing=data["deactivate_missing"],
            reactivate_returning=data["reactivate_returning"],
            include_prompts=data["include_prompts"],
            include_resources=data["include_resources"],
        )


class PrefixRefreshRequestSerializer(RefreshRequestSerializer):
    """Body of `POST /api/tools/refresh`: the gateway is named by its prefix."""

    prefix = StrictCharField(
        max_length=64,
        validators=[_no_control_chars],
        help_text="The gateway prefix whose imported tools to refresh.",
    )


class ReportItemSerializer(serializers.Serializer):
    name = serializers.CharField()
    change = serializers.ChoiceField(
        choices=["added", "updated", "unchanged", "returning", "disappeared"]
    )
    changed_fields = serializers.ListField(child=serializers.CharField())
    before = serializers.DictField(
        allow_null=True, help_text="Server-owned fields before (MCP camelCase keys)."
    )
    after = serializers.DictField(
        allow_null=True,
        help_text="Server-owned fields offered now (MCP camelCase keys).",
    )
    effect_hint = serializers.ChoiceField(
        choices=Effect.choices,
        allow_null=True,
        help_text="From annotations.readOnlyHint; a hint, not an instruction.",
    )
    effect = serializers.ChoiceField(
        choices=Effect.choices, allow_null=True, help_text="The row's effect now."
    )
    effect_after = serializers.ChoiceField(
        choices=Effect.choices,
        allow_null=True,
        required=False,
        help_text="The row's effect after apply (differs only with apply_effect).",
    )
    action = serializers.ChoiceField(
        choices=[
            "create",
            "update",
            "none",
            "reactivate",
            "leave_inactive",
            "deactivate",
            "leave_active",
        ],
        help_text="What apply takes (or would take).",
    )
    requires_review = serializers.BooleanField(required=False)
    referenced_by = serializers.ListField(
        child=serializers.CharField(),
        help_text="Skill revisions that still name a disappeared tool.",
    )


class SkippedEntrySerializer(serializers.Serializer):
    name = serializers.CharField(allow_blank=True)
    reason = serializers.CharField()


# Counts every report carries beyond SPEC 6's list (refresh.report.summarize).
EXTRA_SUMMARY_KEYS = {
    "unseen": "Rows a partial listing did not show (left as they are).",
    "requires_review": "Approved tools whose new revision now needs re-approval.",
    "effect_changed": "Tools whose effect apply changed from server hints.",
}


def _summary_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {
        key: serializers.IntegerField(min_value=0) for key in SUMMARY_KEYS
    }
    for key, help_text in EXTRA_SUMMARY_KEYS.items():
        fields[key] = serializers.IntegerField(
            min_value=0, required=False, help_text=help_text
        )
    return fields


ReportSummarySerializer = type(
    "ReportSummarySerializer",
    (serializers.Serializer,),
    {
        **_summary_fields(),
        "__doc__": "Counts per change, plus what apply deactivated / reactivated.",
    },
)


class EntriesSectionSerializer(serializers.Serializer):
    """The `prompts` / `resources` section, when included."""

    read = serializers.BooleanField()
    note = serializers.CharField(required=False)
    complete = serializers.BooleanField(required=False)
    incomplete_reason = serializers.CharField(required=False, allow_null=True)
    summary = ReportSummarySerializer(required=False)
    items = ReportItemSerializer(many=True, required=False)
    skipped = SkippedEntrySerializer(many=True, required=False)


class ToolRefreshReportSerializer(serializers.Serializer):
    """`ToolRefreshReport` (SPEC 6): what a refresh saw, did, and did not do."""

    run_id = serializers.IntegerField(allow_null=True)
    gateway_id = serializers.IntegerField()
    prefix = serializers.CharField()
    source = serializers.CharField(
        allow_blank=True, help_text="The server's URL, or its command line."
    )
    trigger = serializers.ChoiceField(choices=RefreshRun.Trigger.choices)
    applied = serializers.BooleanField()
    complete = serializers.BooleanField(
        help_text="False when the listing was read only in part (then nothing "
        "counts as disappeared)."
    )
    incomplete_reason = serializers.CharField(required=False, allow_null=True)
    protocol_version = serializers.CharField(allow_blank=True, required=False)
    duration_ms = serializers.IntegerField(min_value=0)
    summary = ReportSummarySerializer()
    items = ReportItemSerializer(many=True)
    skipped = SkippedEntrySerializer(many=True)
    note = serializers.CharField(
        help_text="One plain sentence: what happened, what was not done and why."
    )
    stale_preview = serializers.BooleanField(required=False)
    prompts = EntriesSectionSerializer(required=False)
    resources = EntriesSectionSerializer(required=False)
    skills = serializers.DictField(
        required=False, help_text="The skills refresh that followed an apply (SPEC 8)."
    )


class RefreshRunListSerializer(serializers.ModelSerializer):
    """A refresh run in lists (without its report; read the run for that)."""

    requested_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = RefreshRun
        fields = [
            "id",
            "gateway",
            "trigger",
            "requested_by",
            "status",
            "reason",
            "error_code",
            "applied",
            "complete",
            "options",
            "summary",
            "queued_at",
            "started_at",
            "finished_at",
            "duration_ms",
        ]
        read_only_fields = fields


class RefreshRunSerializer(RefreshRunListSerializer):
    """A refresh run with its full report."""

    report = serializers.JSONField(
        read_only=True,
        help_text="The ToolRefreshReport for runs that read the catalog; "
        "`{note, error}` for runs that failed.",
    )

    class Meta(RefreshRunListSerializer.Meta):
        fields = [*RefreshRunListSerializer.Meta.fields, "report"]
        read_only_fields = fields
