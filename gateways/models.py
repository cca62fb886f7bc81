"""Tenants, memberships and gateways (remote MCP servers).

Gateway rows are written through `gateways.services` (registration, policy)
and `refresh.lease` / `refresh.services` (lease, health, refresh outcome).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

PREFIX_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
# The refresh policy of SPEC 5.2, as Gateway fields: what scheduled and
# event-driven runs do. Admin, API and the sweep list these together.
POLICY_FIELDS = (
    "refresh_interval",
    "auto_apply",
    "deactivate_missing",
    "reactivate_returning",
    "apply_effect",
    "include_prompts",
    "include_resources",
)


class Tenant(models.Model):
    """An organisation; every gateway, tool and run belongs to exactly one."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    """Membership roles, ordered `viewer < member < admin < owner`."""

    VIEWER = "viewer", "Viewer"
    MEMBER = "member", "Member"
    ADMIN = "admin", "Admin"
    OWNER = "owner", "Owner"

    @classmethod
    def rank(cls, role: str) -> int:
        return ROLE_RANK[role]


ROLE_RANK: dict[str, int] = {
    Role.VIEWER: 0,
    Role.MEMBER: 1,
    Role.ADMIN: 2,
    Role.OWNER: 3,
}


class Membership(models.Model):
    """A user's role in one tenant."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "tenant"], name="membership_unique_user_tenant"
            ),
            models.CheckConstraint(
                condition=Q(role__in=["viewer", "member", "admin", "owner"]),
                name="membership_role_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.tenant_id}:{self.role}"

    def has_at_least(self, role: str) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK[role]


class Gateway(models.Model):
    """One MCP server of one tenant.

    Health moves `unknown -> healthy | unreachable`, `healthy -> unreachable`
    after `TOOLSYNC_UNREACHABLE_AFTER` consecutive failed checks, and
    `unreachable -> healthy` on the first successful check (which triggers a
    `recovery` refresh).

    The refresh lease (`lease_token`, `lease_expires_at`, `lease_run_id`) is
    taken and released only by `refresh.lease`, in short transactions; it is
    never held as an open transaction across network calls.
    """

    class Transport(models.TextChoices):
        STREAMABLE_HTTP = "streamable_http", "Streamable HTTP"
        SSE = "sse", "SSE"
        STDIO = "stdio", "stdio"

    class AuthType(models.TextChoices):
        NONE = "none", "None"
        BEARER = "bearer", "Bearer token"
        HEADERS = "headers", "Custom headers"
        AS_CALLER = "as_caller", "As the calling user"

    class Health(models.TextChoices):
        UNKNOWN = "unknown", "Unknown"
        HEALTHY = "healthy", "Healthy"
        UNREACHABLE = "unreachable", "Unreachable"

    class Era(models.TextChoices):
        UNKNOWN = "", "Unknown"
        LEGACY = "legacy", "Handshake (initialize)"
        MODERN = "modern", "Stateless (2026-07-28)"

    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="gateways"
    )
    name = models.CharField(max_length=200)
    prefix = models.CharField(
        max_length=64, validators=[RegexValidator(PREFIX_PATTERN)]
    )
    transport = models.CharField(
        max_length=32, choices=Transport.choices, default=Transport.STREAMABLE_HTTP
    )
    url = models.URLField(max_length=2000, blank=True)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    auth_type = models.CharField(
        max_length=16, choices=AuthType.choices, default=AuthType.NONE
    )
    # Fernet token (see gateways.crypto); never rendered, logged or serialised.
    credentials_encrypted = models.TextField(blank=True, default="", editable=False)
    enabled = models.BooleanField(default=True)

    # What the server said at its last initialize / discover.
    protocol_version = models.CharField(max_length=32, blank=True)
    protocol_era = models.CharField(
        max_length=8, choices=Era.choices, blank=True, default=""
    )
    capabilities = models.JSONField(default=dict, blank=True)
    server_info = models.JSONField(default=dict, blank=True)

    # Health (written by health checks; never waits for the lease).
    health = models.CharField(
        max_length=16, choices=Health.choices, default=Health.UNKNOWN
    )
    consecutive_failures = models.PositiveIntegerField(default=0)
    last_health_check_at = models.DateTimeField(null=True, blank=True)
    health_reason = models.TextField(blank=True)
    # Claimed by the health sweep (refresh.health): when the next liveness
    # check of this gateway falls due; empty means at once.
    next_health_check_at = models.DateTimeField(null=True, blank=True, editable=False)

    # Refresh policy (SPEC 5.2), used by scheduled and event-driven runs.
    refresh_interval = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Seconds between scheduled refreshes; empty means the global default.",
    )
    auto_apply = models.BooleanField(default=True)
    deactivate_missing = models.BooleanField(default=False)
    reactivate_returning = models.BooleanField(default=False)
    apply_effect = models.BooleanField(default=False)
    include_prompts = models.BooleanField(default=False)
    include_resources = models.BooleanField(default=False)
    next_refresh_at = models.DateTimeField(null=True, blank=True, db_index=True)

    # Refresh lease: one refresh per gateway at a time.
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    lease_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    lease_run_id = models.BigIntegerField(null=True, blank=True, editable=False)

    # Durable coalescing: a scheduled/event request that found the lease taken
    # leaves this flag, and the run holding the lease starts one follow-up.
    follow_up_requested = models.BooleanField(default=False, editable=False)
    follow_up_trigger = models.CharField(max_length=16, blank=True, editable=False)
    follow_up_options = models.JSONField(default=dict, blank=True, editable=False)

    # Outcome of the last run, denormalised for cheap lists.
    last_refresh_at = models.DateTimeField(null=True, blank=True)
    last_refresh_status = models.CharField(max_length=16, blank=True)
    # None: never read; False: last read was incomplete (skills cannot conclude).
    last_catalog_complete = models.BooleanField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant_id", "prefix"]
        permissions = [("refresh_gateway", "Can refresh gateway tools")]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "prefix"], name="gateway_unique_tenant_prefix"
            ),
            models.CheckConstraint(
                condition=Q(transport__in=["streamable_http", "sse", "stdio"]),
                name="gateway_transport_valid",
            ),
            models.CheckConstraint(
                condition=Q(auth_type__in=["none", "bearer", "headers", "as_caller"]),
                name="gateway_auth_type_valid",
            ),
            models.CheckConstraint(
                condition=(Q(transport="stdio") & ~Q(command=""))
                | (~Q(transport="stdio") & ~Q(url="")),
                name="gateway_has_target",
            ),
        ]
        indexes = [
            models.Index(fields=["enabled", "next_refresh_at"], name="gateway_due_idx"),
            models.Index(
                fields=["enabled", "next_health_check_at"],
                name="gateway_health_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix} ({self.name})"

    def clean(self) -> None:
        if self.transport == self.Transport.STDIO:
            if not self.command:
                raise ValidationError({"command": "A stdio gateway needs a command."})
        elif not self.url:
            raise ValidationError({"url": "An HTTP gateway needs a URL."})
        parts = urlsplit(self.url) if self.url else None
        if parts is not None and (parts.username or parts.password):
            # The URL is shown in lists, reports and logs; secrets belong in
            # the encrypted credentials.
            raise ValidationError(
                {
                    "url": "Do not put credentials in the URL; use a bearer token "
                    "or custom headers, which are stored encrypted."
                }
            )
        if self.transport == self.Transport.STDIO and self.auth_type not in (
            self.AuthType.NONE,
        ):
            raise ValidationError({"auth_type": "stdio gateways take no HTTP auth."})

    @property
    def source(self) -> str:
        """The server's URL, or its command line for stdio."""
        if self.transport == self.Transport.STDIO:
            return " ".join([self.command, *[str(a) for a in self.args]])
        return self.url

    @property
    def effective_refresh_interval(self) -> int:
        return self.refresh_interval or settings.TOOLSYNC_DEFAULT_REFRESH_INTERVAL

    def policy_options(self) -> dict[str, Any]:
        """The stored policy as refresh options (scheduled and event runs)."""
        return {
            "apply": self.auto_apply,
            "apply_effect": self.apply_effect,
            "deactivate_missing": self.deactivate_missing,
            "reactivate_returning": self.reactivate_returning,
            "include_prompts": self.include_prompts,
            "include_resources": self.include_resources,
        }
