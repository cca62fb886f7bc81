"""Refresh runs: one row per attempt to re-read a gateway's catalog."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class RefreshRun(models.Model):
    """One attempt to refresh one gateway.

    Status transitions, written only by `refresh.services`:
    `queued -> running -> succeeded | failed`, and `queued -> skipped` when the
    run cannot start (gateway disabled or unreachable, or coalesced into the
    run that holds the lease). A running run whose worker died is moved to
    `failed` by the next run that takes over its expired lease. At most one
    run per gateway is `running` (partial unique constraint).
    """

    class Trigger(models.TextChoices):
        API = "api", "API"
        ADMIN = "admin", "Admin"
        CLI = "cli", "CLI"
        SCHEDULE = "schedule", "Schedule"
        EVENT = "event", "Event"
        RECOVERY = "recovery", "Recovery"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        SKIPPED = "skipped", "Skipped"

    gateway = models.ForeignKey(
        "gateways.Gateway", on_delete=models.CASCADE, related_name="runs"
    )
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # Refresh options as asked (never a probe credential).
    options = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.QUEUED
    )
    reason = models.TextField(blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    applied = models.BooleanField(default=False)
    complete = models.BooleanField(null=True, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    report = models.JSONField(default=dict, blank=True)
    # Fingerprint of the catalog the run read; an admin Apply compares it
    # with the preview's so nobody applies a catalog they did not see.
    catalog_fingerprint = models.CharField(max_length=64, blank=True)
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    queued_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-queued_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["gateway"],
                condition=Q(status="running"),
                name="refreshrun_one_running_per_gateway",
            ),
            models.CheckConstraint(
                condition=Q(
                    status__in=["queued", "running", "succeeded", "failed", "skipped"]
                ),
                name="refreshrun_status_valid",
            ),
        ]
        indexes = [
            models.Index(
                fields=["gateway", "-queued_at"], name="refreshrun_gateway_recent_idx"
            ),
            models.Index(fields=["status"], name="refreshrun_status_idx"),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} {self.trigger} {self.status}"

    @property
    def outcome(self) -> str:
        """A coarse label for metrics and lists."""
        if self.status == self.Status.SUCCEEDED:
            if self.complete is False:
                return "incomplete"
            return "applied" if self.applied else "dry_run"
        return self.status
