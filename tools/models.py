"""The catalog: tools (with immutable revisions), prompts and resources.

Tool and ToolRevision rows are written only through `tools.services`, called
by `refresh.services` (refresh) and by the API/admin for locally-owned fields
and approval. Nothing in the catalog is ever deleted by a refresh.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

# Server-owned Tool fields: model attribute -> MCP wire key. A refresh writes
# these and nothing else.
TOOL_SERVER_FIELDS: dict[str, str] = {
    "title": "title",
    "description": "description",
    "input_schema": "inputSchema",
    "output_schema": "outputSchema",
    "annotations": "annotations",
    "icons": "icons",
    "execution": "execution",
    "meta": "_meta",
}
# Locally-owned fields: a refresh never overwrites them.
TOOL_LOCAL_FIELDS: tuple[str, ...] = (
    "effect",
    "gated",
    "visibility",
    "alias",
    "tags",
    "jsonpath_filter",
    "admin_notes",
)


class Effect(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"


class Tool(models.Model):
    """One function a gateway offers.

    `review_state` transitions: new rows start `pending`; an admin approval
    sets `approved` and pins `approved_revision`; a refresh that writes a newer
    revision of an approved tool sets `changed`; approving again returns it to
    `approved`. A refresh never approves anything.

    `active` goes false only through an applied refresh with
    `deactivate_missing` on a complete catalog, and true again only with
    `reactivate_returning`.
    """

    class Visibility(models.TextChoices):
        VISIBLE = "visible", "Visible"
        HIDDEN = "hidden", "Hidden"

    class ReviewState(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        CHANGED = "changed", "Changed since approval"

    gateway = models.ForeignKey(
        "gateways.Gateway", on_delete=models.CASCADE, related_name="tools"
    )
    name = models.CharField(max_length=128)

    # Server-owned. NULL means "absent", which MCP (and the spec hash) tells
    # apart from an empty string.
    title = models.TextField(blank=True, null=True)  # noqa: DJ001
    description = models.TextField(blank=True, null=True)  # noqa: DJ001
    input_schema = models.JSONField(default=dict)
    output_schema = models.JSONField(null=True, blank=True)
    annotations = models.JSONField(null=True, blank=True)
    icons = models.JSONField(null=True, blank=True)
    execution = models.JSONField(null=True, blank=True)
    meta = models.JSONField(null=True, blank=True)
    spec_hash = models.CharField(max_length=64)

    # Locally-owned.
    effect = models.CharField(
        max_length=8, choices=Effect.choices, default=Effect.WRITE
    )
    gated = models.BooleanField(default=True)
    visibility = models.CharField(
        max_length=16, choices=Visibility.choices, default=Visibility.VISIBLE
    )
    alias = models.CharField(max_length=200, blank=True)
    tags = models.JSONField(default=list, blank=True)
    jsonpath_filter = models.CharField(max_length=500, blank=True)
    admin_notes = models.TextField(blank=True)

    # Review (definition pinning).
    review_state = models.CharField(
        max_length=16, choices=ReviewState.choices, default=ReviewState.PENDING
    )
    approved_revision = models.ForeignKey(
        "tools.ToolRevision",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    current_revision = models.PositiveIntegerField(default=0)

    active = models.BooleanField(default=True)
    deactivated_at = models.DateTimeField(null=True, blank=True)
    deactivated_reason = models.TextField(blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["gateway_id", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["gateway", "name"], name="tool_unique_gateway_name"
            ),
            models.CheckConstraint(
                condition=Q(effect__in=["read", "write"]), name="tool_effect_valid"
            ),
            models.CheckConstraint(
                condition=Q(review_state__in=["pending", "approved", "changed"]),
                name="tool_review_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(active=True) | Q(deactivated_at__isnull=False),
                name="tool_inactive_has_timestamp",
            ),
        ]
        indexes = [
            models.Index(fields=["gateway", "active"], name="tool_gateway_active_idx")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def qualified_name(self) -> str:
        return f"{self.gateway.prefix}{settings.TOOLSYNC_TOOL_SEPARATOR}{self.name}"

    @property
    def transport(self) -> str:
        """Derived: the request transport follows the gateway."""
        return self.gateway.transport

    @property
    def auth_type(self) -> str:
        """Derived: authentication follows the gateway."""
        return self.gateway.auth_type

    def server_spec(self) -> dict[str, Any]:
        """The server-owned fields in MCP wire form, absent values left out."""
        spec: dict[str, Any] = {"name": self.name}
        for attr, key in TOOL_SERVER_FIELDS.items():
            value = getattr(self, attr)
            if value is not None:
                spec[key] = value
        return spec


class ToolRevision(models.Model):
    """Immutable snapshot of a tool's server-owned spec.

    Numbered 1..n per tool without gaps (unique per tool; on PostgreSQL a
    trigger also rejects a number whose predecessor is missing and any
    UPDATE). Written whenever a refresh creates or changes the tool.
    """

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField()
    spec_hash = models.CharField(max_length=64)
    changed_fields = models.JSONField(default=list, blank=True)
    refresh_run = models.ForeignKey(
        "refresh.RefreshRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="tool_revisions",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tool_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool", "number"], name="toolrevision_unique_number"
            ),
            models.CheckConstraint(
                condition=Q(number__gte=1), name="toolrevision_number_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool_id}#{self.number}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise ValueError("ToolRevision rows are immutable")
        super().save(*args, **kwargs)


class _CatalogEntry(models.Model):
    """Shared shape of prompts and resources: a spec, a hash, active flag."""

    gateway = models.ForeignKey(
        "gateways.Gateway", on_delete=models.CASCADE, related_name="+"
    )
    spec = models.JSONField()
    spec_hash = models.CharField(max_length=64)
    active = models.BooleanField(default=True)
    deactivated_at = models.DateTimeField(null=True, blank=True)
    deactivated_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class Prompt(_CatalogEntry):
    """One prompt a gateway offers (`prompts/list`), keyed by name."""

    gateway = models.ForeignKey(
        "gateways.Gateway", on_delete=models.CASCADE, related_name="prompts"
    )
    name = models.CharField(max_length=128)

    class Meta:
        ordering = ["gateway_id", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["gateway", "name"], name="prompt_unique_gateway_name"
            )
        ]

    def __str__(self) -> str:
        return self.name


class Resource(_CatalogEntry):
    """One resource a gateway offers (`resources/list`), keyed by URI."""

    gateway = models.ForeignKey(
        "gateways.Gateway", on_delete=models.CASCADE, related_name="resources"
    )
    uri = models.CharField(max_length=2000)
    name = models.CharField(max_length=200)

    class Meta:
        ordering = ["gateway_id", "uri"]
        constraints = [
            models.UniqueConstraint(
                fields=["gateway", "uri"], name="resource_unique_gateway_uri"
            )
        ]

    def __str__(self) -> str:
        return self.uri
