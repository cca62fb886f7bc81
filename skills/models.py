"""Skills: named bundles of tool references that can include other skills (SPEC 8).

Skill, SkillRevision and SkillReference rows are written only through
`skills.services` (create, new revision, delete) and `skills.registry`
(the computed status columns of Skill).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

# `namespace/name`, lower case so that two skills cannot differ only by case.
SKILL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}/[a-z0-9][a-z0-9_.-]{0,127}$"
SKILL_NAME_MAX = 64 + 1 + 128
# A qualified tool name: gateway prefix (64) + separator + tool name (128).
TOOL_REF_MAX = 255


class Skill(models.Model):
    """A named bundle of tools of one tenant; its content lives in revisions.

    `current_revision` is the newest SkillRevision. The status columns hold
    the last computed outcome (`skills.registry`): `unknown` until first
    computed, then `ok`, `failed` (missing tools, an include cycle or a missing
    include; `error` says which) or `skipped` (a referenced gateway's catalog
    is unknown or incomplete, so nothing could be concluded). Any outcome can
    follow any other whenever the skill or a catalog it names changes.
    """

    class Status(models.TextChoices):
        UNKNOWN = "unknown", "Unknown"
        OK = "ok", "OK"
        FAILED = "failed", "Failed"
        SKIPPED = "skipped", "Skipped"

    tenant = models.ForeignKey(
        "gateways.Tenant", on_delete=models.PROTECT, related_name="skills"
    )
    name = models.CharField(
        max_length=SKILL_NAME_MAX,
        validators=[
            RegexValidator(
                SKILL_NAME_PATTERN,
                "Use namespace/name: lower-case letters, digits, '_', '.' or '-'.",
            )
        ],
    )
    current_revision = models.ForeignKey(
        "skills.SkillRevision",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    # Last computed outcome (written only by skills.registry).
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.UNKNOWN
    )
    error = models.TextField(blank=True)
    missing = models.JSONField(default=list, blank=True)
    resolved_tools = models.JSONField(default=list, blank=True)
    # Hash of (status, error, missing, resolved_tools): the registry compares
    # it instead of loading the stored lists, and writes only on a change.
    outcome_digest = models.CharField(max_length=32, blank=True, editable=False)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    # The catalog refresh whose skills step last changed the outcome, if any.
    status_run = models.ForeignKey(
        "refresh.RefreshRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant_id", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"], name="skill_unique_tenant_name"
            ),
            models.CheckConstraint(
                condition=Q(status__in=["unknown", "ok", "failed", "skipped"]),
                name="skill_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def revision_number(self) -> int:
        return self.current_revision.number if self.current_revision else 0


class SkillRevision(models.Model):
    """Immutable content of a skill: tool references and included skills.

    Numbered 1..n per skill without gaps (unique per skill; on PostgreSQL a
    trigger also rejects a number whose predecessor is missing and any
    UPDATE). `tools` holds qualified tool names
    (`<gateway prefix><TOOLSYNC_TOOL_SEPARATOR><tool name>`) of the skill's
    tenant; `includes` holds skill names of the same tenant.
    """

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    tools = models.JSONField(default=list, blank=True)
    includes = models.JSONField(default=list, blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["skill_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["skill", "number"], name="skillrevision_unique_number"
            ),
            models.CheckConstraint(
                condition=Q(number__gte=1), name="skillrevision_number_positive"
            ),
        ]

    def __str__(self) -> str:
        return self.label

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise ValueError("SkillRevision rows are immutable")
        super().save(*args, **kwargs)

    @property
    def label(self) -> str:
        """`namespace/name@n`, the form reports use."""
        return f"{self.skill.name}@{self.number}"


class SkillReference(models.Model):
    """One name a skill revision refers to, one row each, for indexed reverse lookups.

    Derived from the revision when it is written and never changed: `kind`
    `tool` rows carry a qualified tool name, `include` rows a skill name.
    They answer "which revisions still name this tool" (report items'
    `referenced_by`) and "which skills must be re-validated when this
    gateway's catalog changes" without scanning JSON.
    """

    class Kind(models.TextChoices):
        TOOL = "tool", "Tool"
        INCLUDE = "include", "Included skill"

    tenant = models.ForeignKey(
        "gateways.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="+")
    revision = models.ForeignKey(
        SkillRevision, on_delete=models.CASCADE, related_name="references"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    target = models.CharField(max_length=TOOL_REF_MAX)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["revision", "kind", "target"],
                name="skillreference_unique_target",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["tool", "include"]),
                name="skillreference_kind_valid",
            ),
        ]
        indexes = [
            # Pattern ops let `target LIKE 'prefix__%'` (a gateway's tools) use
            # the index on PostgreSQL; they serve equality too.
            models.Index(
                fields=["tenant", "kind", "target"],
                name="skillreference_lookup_idx",
                opclasses=["int8_ops", "varchar_pattern_ops", "varchar_pattern_ops"],
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}"
