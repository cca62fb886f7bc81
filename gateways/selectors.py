"""Reads of tenants and gateways."""

from __future__ import annotations

from django.db.models import QuerySet

from gateways.models import ROLE_RANK, Gateway, Membership


def gateway_by_id_or_prefix(ref: str, *, tenant_slug: str | None = None) -> Gateway:
    """Find a gateway by numeric id or by prefix (unique per tenant)."""
    qs = Gateway.objects.select_related("tenant")
    if tenant_slug:
        qs = qs.filter(tenant__slug=tenant_slug)
    if ref.isdigit():
        found = qs.filter(pk=int(ref)).first()
        if found:
            return found
    matches = list(qs.filter(prefix=ref)[:2])
    if not matches:
        raise LookupError(f"no gateway with id or prefix {ref!r}")
    if len(matches) > 1:
        raise LookupError(f"prefix {ref!r} exists in several tenants; pass --tenant")
    return matches[0]


def tenant_ids_for(user, *, min_role: str = "viewer") -> QuerySet[Membership]:  # type: ignore[no-untyped-def]
    """Ids of the tenants where `user` holds at least `min_role`."""
    roles = [r for r, rank in ROLE_RANK.items() if rank >= ROLE_RANK[min_role]]
    return Membership.objects.filter(user=user, role__in=roles).values_list(
        "tenant_id", flat=True
    )


def gateway_list_for_user(user, *, min_role: str = "viewer") -> QuerySet[Gateway]:  # type: ignore[no-untyped-def]
    return Gateway.objects.filter(tenant_id__in=tenant_ids_for(user, min_role=min_role))
