"""Writes to tenants, memberships and gateways (registration and credentials)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from gateways.crypto import decrypt_credentials, encrypt_credentials, rotate_token
from gateways.models import POLICY_FIELDS, Gateway, Membership, Tenant
from refresh.probe import ProbeLimits, ProbeTarget


class GatewayConfigError(Exception):
    """A gateway cannot be probed as configured (e.g. missing credential)."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


def tenant_get_or_create(*, slug: str, name: str | None = None) -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return tenant


def membership_set(*, user: Any, tenant: Tenant, role: str) -> Membership:
    membership, _ = Membership.objects.update_or_create(
        user=user, tenant=tenant, defaults={"role": role}
    )
    return membership


def credentials_payload(
    *,
    auth_type: str,
    auth_token: str | None = None,
    auth_headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What is encrypted for an auth type (nothing for none / as_caller)."""
    if auth_type == Gateway.AuthType.BEARER:
        if not auth_token:
            raise GatewayConfigError(
                "a bearer gateway needs auth_token", code="missing_credential"
            )
        return {"token": auth_token}
    if auth_type == Gateway.AuthType.HEADERS:
        if not auth_headers:
            raise GatewayConfigError(
                "a headers gateway needs auth_headers", code="missing_credential"
            )
        return {"headers": {str(k): str(v) for k, v in auth_headers.items()}}
    return {}


def gateway_set_credentials(
    *,
    gateway: Gateway,
    auth_type: str,
    auth_token: str | None = None,
    auth_headers: Mapping[str, str] | None = None,
    save: bool = True,
) -> Gateway:
    """Encrypt and store a gateway's credentials (write-only)."""
    gateway.auth_type = auth_type
    gateway.credentials_encrypted = encrypt_credentials(
        credentials_payload(
            auth_type=auth_type, auth_token=auth_token, auth_headers=auth_headers
        )
    )
    if save:
        gateway.save(update_fields=["auth_type", "credentials_encrypted", "updated_at"])
    return gateway


def gateway_create(
    *,
    tenant: Tenant,
    name: str,
    prefix: str,
    transport: str = Gateway.Transport.STREAMABLE_HTTP,
    url: str = "",
    command: str = "",
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    auth_type: str = Gateway.AuthType.NONE,
    auth_token: str | None = None,
    auth_headers: Mapping[str, str] | None = None,
    **policy: Any,
) -> Gateway:
    """Register a gateway. Validates the model before writing."""
    gateway = Gateway(
        tenant=tenant,
        name=name,
        prefix=prefix,
        transport=transport,
        url=url,
        command=command,
        args=list(args),
        env=dict(env or {}),
        **policy,
    )
    gateway_set_credentials(
        gateway=gateway,
        auth_type=auth_type,
        auth_token=auth_token,
        auth_headers=auth_headers,
        save=False,
    )
    if Gateway.objects.filter(tenant=tenant, prefix=prefix).exists():
        raise _prefix_taken()
    gateway.full_clean(validate_constraints=False)
    try:
        # The savepoint keeps a caller's transaction usable after a lost race.
        with transaction.atomic():
            gateway.save()
    except IntegrityError as exc:
        # Two registrations of one prefix raced past the check above; the
        # unique constraint decides, and the loser gets the same answer.
        if Gateway.objects.filter(tenant=tenant, prefix=prefix).exists():
            raise _prefix_taken() from None
        raise exc
    return gateway


def _prefix_taken() -> ValidationError:
    return ValidationError(
        {
            "prefix": ValidationError(
                "This tenant already has a gateway with this prefix.", code="unique"
            )
        }
    )


def gateway_rotate_credentials() -> int:
    """Re-encrypt every stored credential with the primary key."""
    count = 0
    with transaction.atomic():
        for gateway in Gateway.objects.select_for_update().exclude(
            credentials_encrypted=""
        ):
            gateway.credentials_encrypted = rotate_token(gateway.credentials_encrypted)
            gateway.save(update_fields=["credentials_encrypted"])
            count += 1
    return count


def gateway_auth_headers(
    gateway: Gateway, probe_credential: str | None = None
) -> dict[str, str]:
    """The HTTP headers that authenticate to the gateway, for one run only."""
    if gateway.auth_type == Gateway.AuthType.AS_CALLER:
        if not probe_credential:
            raise GatewayConfigError(
                "this gateway authenticates as the caller; a probe_credential is required",
                code="probe_credential_required",
            )
        return {"Authorization": f"Bearer {probe_credential}"}
    stored = decrypt_credentials(gateway.credentials_encrypted)
    if gateway.auth_type == Gateway.AuthType.BEARER:
        return {"Authorization": f"Bearer {stored.get('token', '')}"}
    if gateway.auth_type == Gateway.AuthType.HEADERS:
        return dict(stored.get("headers", {}))
    return {}


def gateway_probe_target(
    gateway: Gateway, *, probe_credential: str | None = None
) -> ProbeTarget:
    """Everything the probe needs to connect, credentials included."""
    return ProbeTarget(
        transport=gateway.transport,
        url=gateway.url,
        command=gateway.command,
        args=tuple(str(a) for a in gateway.args),
        env={str(k): str(v) for k, v in (gateway.env or {}).items()},
        headers=gateway_auth_headers(gateway, probe_credential),
        era=gateway.protocol_era,
    )


def probe_limits() -> ProbeLimits:
    return ProbeLimits(
        max_pages=settings.TOOLSYNC_PROBE_MAX_PAGES,
        max_entries=settings.TOOLSYNC_PROBE_MAX_TOOLS,
        request_timeout=settings.TOOLSYNC_PROBE_REQUEST_TIMEOUT,
        deadline=settings.TOOLSYNC_PROBE_DEADLINE,
    )


def gateway_secret_values(gateway: Gateway) -> list[str]:
    """Every stored secret string of a gateway (for scrubbing output)."""
    try:
        stored = decrypt_credentials(gateway.credentials_encrypted)
    except Exception:  # noqa: BLE001 - scrubbing must never fail a run
        return []
    values = [stored.get("token", "")] + list(stored.get("headers", {}).values())
    return [v for v in values if v]


class GatewayInUse(Exception):
    """A gateway cannot be deleted: its catalog is history, or a refresh runs."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


# Fields `gateway_update` may change; tenant and prefix are fixed at creation
# (tools' qualified names and skills' references are built from the prefix).
GATEWAY_UPDATABLE_FIELDS = (
    "name",
    "transport",
    "url",
    "command",
    "args",
    "env",
    "enabled",
    *POLICY_FIELDS,
)


def gateway_update(
    *,
    gateway: Gateway,
    fields: Mapping[str, Any],
    auth_type: str | None = None,
    auth_token: str | None = None,
    auth_headers: Mapping[str, str] | None = None,
) -> Gateway:
    """Change a gateway's target, policy or credentials; validates before writing.

    Credentials change only when `auth_type`, `auth_token` or `auth_headers`
    is given: a new secret for the current auth type, or a new auth type with
    its secret (`none` / `as_caller` clear the stored one).
    """
    foreign = sorted(set(fields) - set(GATEWAY_UPDATABLE_FIELDS))
    if foreign:
        raise GatewayConfigError(
            f"these gateway fields cannot be changed: {', '.join(foreign)}",
            code="not_updatable",
        )
    with transaction.atomic():
        # Lock the row: a refresh finishing now writes health and metadata to
        # it, and a plain save() of a stale copy would undo those writes.
        locked = Gateway.objects.select_for_update().get(pk=gateway.pk)
        for name, value in fields.items():
            setattr(locked, name, value)
        update_fields = [*fields, "updated_at"]
        if auth_type is not None or auth_token is not None or auth_headers is not None:
            gateway_set_credentials(
                gateway=locked,
                auth_type=auth_type or locked.auth_type,
                auth_token=auth_token,
                auth_headers=auth_headers,
                save=False,
            )
            update_fields += ["auth_type", "credentials_encrypted"]
        locked.full_clean()
        locked.save(update_fields=update_fields)
    return locked


def gateway_delete(*, gateway: Gateway) -> None:
    """Delete a gateway that has no catalog rows and no refresh running.

    Tools, revisions, prompts and resources are history: a gateway that has
    any is never deleted (disable it instead), so nothing is lost silently.
    """
    from refresh.models import RefreshRun
    from tools.models import Prompt, Resource, Tool

    with transaction.atomic():
        # Lock the row: an apply that creates tools holds this lock too, so
        # either it lands first (and we refuse) or it runs after the delete.
        locked = Gateway.objects.select_for_update().get(pk=gateway.pk)
        if (
            Tool.objects.filter(gateway=locked).exists()
            or Prompt.objects.filter(gateway=locked).exists()
            or Resource.objects.filter(gateway=locked).exists()
        ):
            raise GatewayInUse(
                "the gateway has catalog rows (tools, revisions, prompts or "
                "resources), which are kept as history; disable it with "
                '{"enabled": false} instead',
                code="gateway_has_catalog",
            )
        if RefreshRun.objects.filter(
            gateway=locked, status=RefreshRun.Status.RUNNING
        ).exists():
            raise GatewayInUse(
                "a refresh of this gateway is running; try again when it ends",
                code="refresh_in_progress",
            )
        locked.delete()
