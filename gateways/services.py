"""Writes to tenants, memberships and gateways (registration and credentials)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from gateways.crypto import decrypt_credentials, encrypt_credentials, rotate_token
from gateways.models import Gateway, Membership, Tenant
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
    gateway.full_clean()
    gateway.save()
    return gateway


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
