"""Refresh runs: create, execute (lease -> probe -> normalize -> finish), fail.

`refresh_run_execute` never holds a transaction while the network is in use:
the lease is taken in one short transaction, the probe runs outside any, and
`refresh.apply.finish_run` writes everything else in one more.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gateways.crypto import CredentialError
from gateways.models import Gateway
from gateways.services import (
    GatewayConfigError,
    gateway_probe_target,
    gateway_secret_values,
    probe_limits,
)
from refresh import metrics
from refresh.apply import ProbedCatalog, close_gateway_run, finish_run
from refresh.collector import collector_paused
from refresh.diff import catalog_fingerprint
from refresh.exceptions import (
    GatewayDisabled,
    GatewayUnreachable,
    LeaseLost,
    ProbeCredentialRequired,
    RefreshError,
    RefreshInProgress,
)
from refresh.lease import lease_acquire
from refresh.models import RefreshRun
from refresh.normalize import (
    NormalizeLimits,
    normalize_prompts,
    normalize_resources,
    normalize_tools,
)
from refresh.options import RefreshOptions
from refresh.probe import ProbeError, ProbeResult, probe_gateway, scrub_secrets

logger = logging.getLogger("toolsync.refresh")

Trigger = RefreshRun.Trigger
Status = RefreshRun.Status
MANUAL_TRIGGERS = frozenset({Trigger.API, Trigger.ADMIN, Trigger.CLI})
# Shared with refresh.schedule, which records these skips without a worker.
UNREACHABLE_SKIP_REASON = (
    "the gateway is unreachable; health checks will refresh it when it is back"
)
UNREACHABLE_SKIP_CODE = "gateway_unreachable"


def normalize_limits() -> NormalizeLimits:
    return NormalizeLimits(
        max_description_chars=settings.TOOLSYNC_MAX_DESCRIPTION_CHARS,
        max_schema_bytes=settings.TOOLSYNC_MAX_SCHEMA_BYTES,
    )


def refresh_run_create(
    *,
    gateway: Gateway,
    trigger: str,
    requested_by: Any = None,
    options: RefreshOptions | None = None,
) -> RefreshRun:
    """Record a queued run."""
    return RefreshRun.objects.create(
        gateway=gateway,
        trigger=trigger,
        requested_by=requested_by
        if getattr(requested_by, "is_authenticated", False)
        else None,
        options=(options or RefreshOptions()).as_json(),
    )


def refresh_gateway(
    *,
    gateway: Gateway,
    trigger: str,
    requested_by: Any = None,
    options: RefreshOptions | None = None,
    probe_credential: str | None = None,
) -> RefreshRun:
    """Create and execute a run now (manual triggers raise `RefreshError`s)."""
    run = refresh_run_create(
        gateway=gateway, trigger=trigger, requested_by=requested_by, options=options
    )
    return refresh_run_execute(run=run, probe_credential=probe_credential)


def probe_catalog(result: ProbeResult) -> ProbedCatalog:
    """Normalize every listing of a probe result (pure)."""
    limits = normalize_limits()
    tools = normalize_tools(result.tools.entries, limits)
    return ProbedCatalog(
        probe=result,
        tools=tools,
        prompts=normalize_prompts(result.prompts.entries, limits)
        if result.prompts
        else None,
        resources=(
            normalize_resources(result.resources.entries, limits)
            if result.resources
            else None
        ),
        fingerprint=catalog_fingerprint(
            tools.entries, tools.skipped, result.tools.complete
        ),
    )


def _skip(run: RefreshRun, reason: str, code: str) -> RefreshRun:
    now = timezone.now()
    RefreshRun.objects.filter(pk=run.pk, status=Status.QUEUED).update(
        status=Status.SKIPPED, reason=reason, error_code=code, finished_at=now
    )
    run.refresh_from_db()
    _log_run(run)
    return run


def refresh_run_execute(
    *, run: RefreshRun, probe_credential: str | None = None
) -> RefreshRun:
    """Execute a queued run to its end and return it.

    Manual runs (api, admin, cli) raise a `RefreshError` subclass for the
    outcomes the API maps to a status (409, 422, 502); the run is recorded
    either way. Scheduled, event and recovery runs never raise for those.
    """
    with collector_paused():
        return _execute(run, probe_credential)


def _execute(run: RefreshRun, probe_credential: str | None) -> RefreshRun:
    started = time.monotonic()
    gateway = Gateway.objects.get(pk=run.gateway_id)
    manual = run.trigger in MANUAL_TRIGGERS
    options = RefreshOptions.from_json(run.options)

    if not gateway.enabled:
        run = _skip(run, "the gateway is disabled", "gateway_disabled")
        if manual:
            raise GatewayDisabled("the gateway is disabled", run_id=run.pk)
        return run
    if gateway.auth_type == Gateway.AuthType.AS_CALLER and not probe_credential:
        reason = (
            "the gateway authenticates as the caller; only a manual refresh with a "
            "probe_credential can read it"
        )
        run = _skip(run, reason, "probe_credential_required")
        if manual:
            raise ProbeCredentialRequired(reason, run_id=run.pk)
        return run
    if (
        run.trigger in (Trigger.SCHEDULE, Trigger.EVENT)
        and gateway.health == Gateway.Health.UNREACHABLE
    ):
        return _skip(run, UNREACHABLE_SKIP_REASON, UNREACHABLE_SKIP_CODE)

    lease = lease_acquire(
        gateway_id=gateway.pk,
        run_id=run.pk,
        coalesce=not manual,
        follow_up_trigger=run.trigger,
        follow_up_options={
            "include_prompts": options.include_prompts,
            "include_resources": options.include_resources,
        },
    )
    if not lease.claimed:
        run.refresh_from_db()
        return run  # another worker already executed this run
    if not lease.acquired:
        holder = lease.holder_run_id
        if manual:
            run = _skip(
                run,
                f"another refresh of this gateway is running (run {holder})",
                "refresh_in_progress",
            )
            raise RefreshInProgress(
                f"a refresh of this gateway is already running (run {holder})",
                running_run_id=holder,
                run_id=run.pk,
            )
        return _skip(
            run,
            f"coalesced: run {holder} is refreshing this gateway; one follow-up run starts after it",
            "coalesced",
        )
    assert lease.token is not None
    run.status, run.started_at, run.lease_token = (
        Status.RUNNING,
        lease.started_at,
        lease.token,
    )
    secrets = gateway_secret_values(gateway) + (
        [probe_credential] if probe_credential else []
    )
    try:
        target = gateway_probe_target(gateway, probe_credential=probe_credential)
        result = probe_gateway(
            target,
            probe_limits(),
            include_prompts=options.include_prompts,
            include_resources=options.include_resources,
        )
        catalog = probe_catalog(result)
    except ProbeError as exc:
        run = refresh_run_fail(
            run=run,
            token=lease.token,
            reason=scrub_secrets(exc.message, secrets),
            code=exc.code,
        )
        if manual:
            raise GatewayUnreachable(
                run.reason, run_id=run.pk, probe_error=exc.code
            ) from None
        return run
    except (GatewayConfigError, CredentialError) as exc:
        code = getattr(exc, "code", "credential_error")
        run = refresh_run_fail(run=run, token=lease.token, reason=str(exc), code=code)
        if manual:
            raise RefreshError(str(exc), run_id=run.pk) from None
        return run
    except Exception as exc:  # noqa: BLE001 - any bug must still free the lease
        logger.exception("refresh run %s: probe crashed", run.pk)
        run = refresh_run_fail(
            run=run,
            token=lease.token,
            reason=scrub_secrets(
                f"probe crashed: {type(exc).__name__}: {exc}", secrets
            )[:1000],
            code="internal_error",
        )
        if manual:
            raise RefreshError(run.reason, run_id=run.pk) from None
        return run

    try:
        outcome = finish_run(
            run=run,
            token=lease.token,
            catalog=catalog,
            options=options,
            started=started,
        )
    except LeaseLost as exc:
        run = _mark_failed(run, str(exc), "lease_lost")
        if manual:
            raise RefreshError(str(exc), run_id=run.pk) from None
        return run
    except Exception as exc:  # noqa: BLE001 - the transaction rolled back; record why
        logger.exception("refresh run %s: apply failed and was rolled back", run.pk)
        run = refresh_run_fail(
            run=run,
            token=lease.token,
            reason=scrub_secrets(
                f"apply failed and was rolled back, nothing written: {type(exc).__name__}: {exc}",
                secrets,
            )[:1000],
            code="apply_failed",
        )
        if manual:
            raise RefreshError(run.reason, run_id=run.pk) from None
        return run
    _log_run(outcome.run)
    return outcome.run


def refresh_run_fail(
    *, run: RefreshRun, token: Any, reason: str, code: str
) -> RefreshRun:
    """Mark a running run failed, release its lease, pick up any follow-up."""
    now = timezone.now()
    with transaction.atomic():
        gateway = Gateway.objects.select_for_update().get(pk=run.gateway_id)
        RefreshRun.objects.filter(pk=run.pk).update(
            status=Status.FAILED,
            reason=reason,
            error_code=code,
            finished_at=now,
            duration_ms=_duration_ms(run, now),
            report={
                "note": f"The refresh failed: {reason}.",
                "error": {"code": code, "message": reason},
            },
        )
        close_gateway_run(gateway, token, status=Status.FAILED, now=now)
    run.refresh_from_db()
    _log_run(run)
    return run


def _mark_failed(run: RefreshRun, reason: str, code: str) -> RefreshRun:
    RefreshRun.objects.filter(pk=run.pk).update(
        status=Status.FAILED, reason=reason, error_code=code, finished_at=timezone.now()
    )
    run.refresh_from_db()
    _log_run(run)
    return run


def _duration_ms(run: RefreshRun, now: Any) -> int | None:
    if run.started_at is None:
        return None
    return int((now - run.started_at).total_seconds() * 1000)


def log_run(run: RefreshRun) -> None:
    """Log and count a finished run (for runs recorded outside this module)."""
    _log_run(run)


def _log_run(run: RefreshRun) -> None:
    """One structured line per run (SPEC 7), and its metrics; never credentials."""
    metrics.run_finished(run)
    logger.info(
        "refresh_run %s",
        json.dumps(
            {
                "run_id": run.pk,
                "gateway_id": run.gateway_id,
                "trigger": run.trigger,
                "status": run.status,
                "outcome": run.outcome,
                "applied": run.applied,
                "complete": run.complete,
                "duration_ms": run.duration_ms,
                "counts": run.summary,
                "reason": run.reason or None,
            },
            sort_keys=True,
        ),
    )
