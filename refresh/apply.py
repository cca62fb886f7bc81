"""The last step of a run, in one transaction: re-check the lease, diff, write, report.

Everything a run writes at its end happens here, inside one
`transaction.atomic(durable=True)` with the gateway row locked: the catalog
changes (when applying), the gateway's metadata, the run's report and status,
the lease release and the pick-up of a coalesced follow-up. Either all of it
lands or none of it does.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from gateways.models import Gateway
from refresh import hooks
from refresh.diff import CatalogDiff, RowSnapshot, diff_catalog
from refresh.exceptions import LeaseLost
from refresh.lease import lease_holds
from refresh.models import RefreshRun
from refresh.normalize import Normalized
from refresh.options import RefreshOptions
from refresh.probe import Listing, ProbeResult
from refresh.report import ReportContext, build_report, entries_section
from tools import selectors as tool_selectors
from tools import services as tool_services
from tools.models import Prompt, Resource


@dataclass(frozen=True, eq=False)
class ProbedCatalog:
    """A probe's result with its listings normalized (no database involved)."""

    probe: ProbeResult
    tools: Normalized
    prompts: Normalized | None
    resources: Normalized | None
    fingerprint: str


@dataclass(frozen=True, eq=False)
class RunOutcome:
    run: RefreshRun
    diff: CatalogDiff | None


def tool_row_snapshots(gateway_id: int, tools: Normalized) -> list[RowSnapshot]:
    """Current rows; specs are read only where the diff needs them.

    A row whose stored hash equals the offered one needs no spec, so a no-op
    refresh reads one narrow query however many tools there are.
    """
    offered = {e.key: e.spec_hash for e in tools.entries}
    skipped = {s.name for s in tools.skipped}
    light = tool_selectors.tool_rows_light(gateway_id=gateway_id)
    need = [
        r["id"]
        for r in light
        if (r["name"] in offered and offered[r["name"]] != r["spec_hash"])
        or (r["name"] not in offered and r["active"] and r["name"] not in skipped)
    ]
    specs = tool_selectors.tool_specs(ids=need) if need else {}
    return [
        RowSnapshot(
            key=r["name"],
            spec=specs.get(r["id"], {}),
            spec_hash=r["spec_hash"],
            active=r["active"],
            effect=r["effect"],
            review_state=r["review_state"],
            revision=r["current_revision"],
            row_id=r["id"],
        )
        for r in light
    ]


def _entry_snapshots(
    model: type[Prompt] | type[Resource], gateway_id: int
) -> list[RowSnapshot]:
    key = "uri" if model is Resource else "name"
    return [
        RowSnapshot(
            key=r[key],
            spec=r["spec"],
            spec_hash=r["spec_hash"],
            active=r["active"],
            row_id=r["id"],
        )
        for r in tool_selectors.entry_rows(model=model, gateway_id=gateway_id)
    ]


def _diff_entries(
    model: type[Prompt] | type[Resource],
    gateway_id: int,
    normalized: Normalized,
    listing: Listing,
    options: RefreshOptions,
) -> CatalogDiff:
    return diff_catalog(
        _entry_snapshots(model, gateway_id),
        normalized.entries,
        normalized.skipped,
        complete=listing.complete,
        incomplete_reason=listing.incomplete_reason,
        options=options.diff_options(),
        has_effect=False,
    )


def finish_run(
    *,
    run: RefreshRun,
    token: uuid.UUID,
    catalog: ProbedCatalog,
    options: RefreshOptions,
    started: float,
) -> RunOutcome:
    """Diff against the stored catalog, apply if asked, record the run, release the lease."""
    stale_preview = bool(
        options.expected_fingerprint
        and options.expected_fingerprint != catalog.fingerprint
    )
    do_apply = options.apply and not stale_preview
    probe = catalog.probe
    with transaction.atomic(durable=True):
        # Lock the gateway and re-check the lease: a run whose lease was taken
        # over (its worker looked dead) must not write an old diff.
        gateway = Gateway.objects.select_for_update().get(pk=run.gateway_id)
        if not lease_holds(gateway, token):
            raise LeaseLost(f"run {run.pk} lost its lease before applying")
        rows = tool_row_snapshots(gateway.pk, catalog.tools)
        candidates = _disappearing(rows, catalog.tools) if probe.tools.complete else []
        references = (
            hooks.skill_references(gateway=gateway, names=candidates)
            if candidates
            else {}
        )
        diff = diff_catalog(
            rows,
            catalog.tools.entries,
            catalog.tools.skipped,
            complete=probe.tools.complete,
            incomplete_reason=probe.tools.incomplete_reason,
            options=options.diff_options(),
            references=references,
        )
        if do_apply and diff.has_writes:
            tool_services.catalog_apply(
                gateway=gateway,
                diff=diff,
                offered={e.key: e for e in catalog.tools.entries},
                rows={r.key: r for r in rows},
                run_id=run.pk,
            )
        sections: dict[str, Any] = {}
        for kind, model, normalized, listing, note in (
            ("prompts", Prompt, catalog.prompts, probe.prompts, probe.prompts_note),
            (
                "resources",
                Resource,
                catalog.resources,
                probe.resources,
                probe.resources_note,
            ),
        ):
            if not getattr(options, f"include_{kind}"):
                continue
            entry_diff = None
            if normalized is not None and listing is not None:
                entry_diff = _diff_entries(
                    model, gateway.pk, normalized, listing, options
                )
                if do_apply and entry_diff.has_writes:
                    tool_services.entries_apply(
                        model=model,
                        gateway=gateway,
                        diff=entry_diff,
                        offered={e.key: e for e in normalized.entries},
                    )
            sections[kind] = entries_section(entry_diff, note, applied=do_apply)
        # Before the skills step: it must see this read's completeness, not
        # the previous one's (a first read would otherwise skip every skill).
        _record_server_metadata(gateway, probe, complete=diff.complete)
        skills = (
            hooks.after_apply(gateway=gateway, run_id=run.pk, changed=diff.has_writes)
            if do_apply
            else None
        )
        duration_ms = int((time.monotonic() - started) * 1000)
        report = build_report(
            diff,
            ReportContext(
                run_id=run.pk,
                gateway_id=gateway.pk,
                prefix=gateway.prefix,
                source=gateway.source,
                trigger=run.trigger,
                applied=do_apply,
                apply_requested=options.apply,
                duration_ms=duration_ms,
                protocol_version=probe.protocol_version,
                stale_preview=stale_preview,
            ),
            prompts=sections.get("prompts"),
            resources=sections.get("resources"),
        )
        if skills is not None:
            report["skills"] = skills
        now = timezone.now()
        final = {
            "status": RefreshRun.Status.SUCCEEDED,
            "applied": do_apply,
            "complete": diff.complete,
            "summary": report["summary"],
            "report": report,
            "reason": "catalog changed since the preview; nothing applied"
            if stale_preview
            else "",
            "catalog_fingerprint": catalog.fingerprint,
            "finished_at": now,
            "duration_ms": duration_ms,
        }
        RefreshRun.objects.filter(pk=run.pk).update(**final)
        close_gateway_run(gateway, token, status=RefreshRun.Status.SUCCEEDED, now=now)
    # Not refresh_from_db(): the report can be megabytes; we have every value.
    for name, value in final.items():
        setattr(run, name, value)
    return RunOutcome(run=run, diff=diff)


def _disappearing(rows: Sequence[RowSnapshot], tools: Normalized) -> list[str]:
    offered = {e.key for e in tools.entries} | {s.name for s in tools.skipped}
    return [r.key for r in rows if r.active and r.key not in offered]


def _record_server_metadata(
    gateway: Gateway, probe: ProbeResult, *, complete: bool
) -> None:
    """Write what initialize said, only where it changed."""
    changes: dict[str, Any] = {}
    wanted: Mapping[str, Any] = {
        "protocol_version": probe.protocol_version,
        "protocol_era": probe.era,
        "capabilities": dict(probe.capabilities),
        "server_info": dict(probe.server_info),
        "last_catalog_complete": complete,
    }
    for name, value in wanted.items():
        if getattr(gateway, name) != value:
            changes[name] = value
            setattr(gateway, name, value)
    if changes:
        Gateway.objects.filter(pk=gateway.pk).update(**changes)


def close_gateway_run(
    gateway: Gateway, token: uuid.UUID, *, status: str, now: Any
) -> None:
    """Inside the locked transaction: record the outcome, release, pick up a follow-up.

    One UPDATE of the locked row. A run whose lease was taken over writes
    nothing here: the run holding the lease now owns the row's outcome and
    its follow-up flag.
    """
    if not lease_holds(gateway, token):
        return
    updates: dict[str, Any] = {
        "last_refresh_at": now,
        "last_refresh_status": status,
        "lease_token": None,
        "lease_expires_at": None,
        "lease_run_id": None,
    }
    follow_up: RefreshRun | None = None
    if gateway.follow_up_requested:
        # The durable coalescing flag: a scheduled or event request arrived
        # while this run held the lease. Exactly one follow-up run starts.
        options = {**gateway.policy_options()}
        for key, value in (gateway.follow_up_options or {}).items():
            options[key] = bool(options.get(key)) or bool(value)
        follow_up = RefreshRun.objects.create(
            gateway=gateway,
            trigger=gateway.follow_up_trigger or RefreshRun.Trigger.EVENT,
            options=options,
        )
        updates.update(
            follow_up_requested=False, follow_up_trigger="", follow_up_options={}
        )
    Gateway.objects.filter(pk=gateway.pk).update(**updates)
    if follow_up is not None:
        run_id = follow_up.pk
        transaction.on_commit(lambda: hooks.enqueue_run(run_id))
