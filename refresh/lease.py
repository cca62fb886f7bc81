"""The per-gateway refresh lease (SPEC 4): one refresh per gateway at a time.

The lease is a token and an expiry on the gateway row, taken and released in
short transactions. It is never held as an open transaction across network
calls: the probe runs between `lease_acquire` and the apply transaction, which
re-checks the token under `select_for_update` before writing.

Correct on SQLite too: taking the lease is a conditional UPDATE, which is
atomic on both databases; `select_for_update` adds PostgreSQL's row lock so the
takeover of an expired lease and the failing of its dead run are one step.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from gateways.models import Gateway
from refresh.models import RefreshRun


@dataclass(frozen=True)
class LeaseResult:
    """Whether the lease was taken; if not, which run holds it.

    `claimed` is false when the run was no longer queued (another worker got
    it first, e.g. a redelivered task); `coalesced` when the request was
    folded into the running refresh as a durable follow-up.
    """

    acquired: bool
    token: uuid.UUID | None = None
    holder_run_id: int | None = None
    claimed: bool = True
    coalesced: bool = False
    started_at: datetime | None = None


class _NotClaimed(Exception):
    pass


def lease_duration() -> timedelta:
    return timedelta(seconds=settings.TOOLSYNC_LEASE_SECONDS)


def lease_acquire(
    *,
    gateway_id: int,
    run_id: int,
    coalesce: bool = False,
    follow_up_trigger: str = "",
    follow_up_options: dict[str, bool] | None = None,
    now: datetime | None = None,
) -> LeaseResult:
    """Take the gateway's lease for queued run `run_id` and mark it running.

    Fails without waiting when a live lease exists; with `coalesce`, it then
    leaves the durable follow-up flag so the running refresh starts exactly
    one more run when it ends. An expired lease is taken over, and the run
    that held it is marked failed: its worker died.
    """
    now = now or timezone.now()
    token = uuid.uuid4()
    try:
        with transaction.atomic():
            # Row lock: a concurrent acquire (or the holder's final apply
            # transaction) waits here instead of racing the steps below; on
            # SQLite the IMMEDIATE transaction serialises the same way.
            gateway = (
                Gateway.objects.select_for_update()
                .only("id", "lease_run_id", "follow_up_options")
                .get(pk=gateway_id)
            )
            previous_run_id = gateway.lease_run_id
            # Conditional update: only a free or expired lease is taken. This
            # is the step that decides the race, on any database.
            taken = Gateway.objects.filter(
                Q(lease_token__isnull=True) | Q(lease_expires_at__lte=now),
                pk=gateway_id,
            ).update(
                lease_token=token,
                lease_expires_at=now + lease_duration(),
                lease_run_id=run_id,
            )
            if not taken:
                if coalesce:
                    merged = dict(gateway.follow_up_options or {})
                    for key, value in (follow_up_options or {}).items():
                        merged[key] = bool(merged.get(key)) or bool(value)
                    Gateway.objects.filter(pk=gateway_id).update(
                        follow_up_requested=True,
                        follow_up_trigger=follow_up_trigger,
                        follow_up_options=merged,
                    )
                return LeaseResult(
                    acquired=False, holder_run_id=previous_run_id, coalesced=coalesce
                )
            # The lease is the truth: any other run still marked running is a
            # dead worker's (its lease expired or was released without it).
            RefreshRun.objects.filter(
                gateway_id=gateway_id, status=RefreshRun.Status.RUNNING
            ).exclude(pk=run_id).update(
                status=RefreshRun.Status.FAILED,
                reason="lease expired: the worker running this refresh stopped responding",
                error_code="lease_expired",
                finished_at=now,
            )
            # Conditional claim: a run is executed once, even if its task is
            # delivered twice.
            claimed = RefreshRun.objects.filter(
                pk=run_id, status=RefreshRun.Status.QUEUED
            ).update(
                status=RefreshRun.Status.RUNNING, started_at=now, lease_token=token
            )
            if not claimed:
                raise _NotClaimed
    except _NotClaimed:
        return LeaseResult(acquired=False, claimed=False)
    return LeaseResult(acquired=True, token=token, holder_run_id=run_id, started_at=now)


def lease_holds(gateway: Gateway, token: uuid.UUID) -> bool:
    """Whether `token` still owns the lease of a row read under `select_for_update`."""
    return gateway.lease_token == token


def lease_release(*, gateway_id: int, token: uuid.UUID) -> bool:
    """Give the lease back; a no-op if it was already taken over."""
    # Conditional on the token: never release a lease someone else now holds.
    released = Gateway.objects.filter(pk=gateway_id, lease_token=token).update(
        lease_token=None, lease_expires_at=None, lease_run_id=None
    )
    return bool(released)
