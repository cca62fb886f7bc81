"""Every write to Tool, ToolRevision, Prompt and Resource rows.

Refresh writes go through `catalog_apply` (called by `refresh.apply` inside
its transaction, with the gateway row locked); the API and admin use
`tool_update_local` and `tool_approve`. All writes are bulk: the number of
queries does not grow with the number of tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from gateways.models import Gateway
from refresh.diff import Action, CatalogDiff, Change, ItemChange, RowSnapshot
from refresh.normalize import EntrySpec
from tools.bulk import copy_insert
from tools.models import (
    TOOL_LOCAL_FIELDS,
    TOOL_SERVER_FIELDS,
    Prompt,
    Resource,
    Tool,
    ToolRevision,
)

BATCH = 1000
DEACTIVATED_REASON = "not offered by the server in a complete listing"


class ToolServiceError(Exception):
    """A request to change a tool that the rules forbid."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ApplyOutcome:
    """What an applied refresh wrote."""

    created: int = 0
    updated: int = 0
    reactivated: int = 0
    deactivated: int = 0
    effect_changed: int = 0
    revisions: int = 0
    review_changed: int = 0


def _batches(items: Sequence[ItemChange]) -> list[Sequence[ItemChange]]:
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]


def _tool_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    fields = {attr: spec.get(key) for attr, key in TOOL_SERVER_FIELDS.items()}
    fields["input_schema"] = spec.get("inputSchema") or {}
    return fields


def catalog_apply(
    *,
    gateway: Gateway,
    diff: CatalogDiff,
    offered: Mapping[str, EntrySpec],
    rows: Mapping[str, RowSnapshot],
    run_id: int | None,
    now: datetime | None = None,
) -> ApplyOutcome:
    """Write a tool diff. The caller holds the transaction and the gateway lock."""
    now = now or timezone.now()
    added = [i for i in diff.items if i.action is Action.CREATE]
    spec_writes = [
        i for i in diff.items if i.writes_spec and i.change is not Change.ADDED
    ]
    reactivate = [i.row_id for i in diff.items if i.action is Action.REACTIVATE]
    deactivate = [i.row_id for i in diff.items if i.action is Action.DEACTIVATE]
    if deactivate and not diff.complete:  # diff never produces this; belt and braces
        raise ToolServiceError(
            "refusing to deactivate on an incomplete catalog", code="incomplete"
        )

    # Batches bound memory: a 10,000-tool first apply never holds 20,000 model
    # instances at once.
    created = 0
    for chunk in _batches(added):
        tools = [
            Tool(
                gateway=gateway,
                name=item.name,
                spec_hash=offered[item.name].spec_hash,
                effect="write",
                gated=True,
                review_state=Tool.ReviewState.PENDING,
                current_revision=1,
                **_tool_fields(offered[item.name].spec),
            )
            for item in chunk
        ]
        copy_insert(Tool, tools)
        copy_insert(
            ToolRevision,
            [
                ToolRevision(
                    tool_id=tool.pk,
                    number=1,
                    spec=offered[tool.name].spec,
                    spec_hash=tool.spec_hash,
                    changed_fields=list(item.changed_fields),
                    refresh_run_id=run_id,
                )
                for tool, item in zip(tools, chunk, strict=True)
            ],
        )
        created += len(tools)

    revisions = 0
    for chunk in _batches(spec_writes):
        numbers = {item.name: rows[item.name].revision + 1 for item in chunk}
        _update_tool_specs(
            [
                Tool(
                    pk=item.row_id,
                    spec_hash=offered[item.name].spec_hash,
                    current_revision=numbers[item.name],
                    **_tool_fields(offered[item.name].spec),
                )
                for item in chunk
            ],
            now,
        )
        copy_insert(
            ToolRevision,
            [
                ToolRevision(
                    tool_id=item.row_id,
                    number=numbers[item.name],
                    spec=offered[item.name].spec,
                    spec_hash=offered[item.name].spec_hash,
                    changed_fields=list(item.changed_fields),
                    refresh_run_id=run_id,
                )
                for item in chunk
            ],
        )
        revisions += len(chunk)

    review_ids = [i.row_id for i in spec_writes if i.requires_review]
    if review_ids:
        # Definition pinning: a new revision of an approved tool needs review.
        Tool.objects.filter(id__in=review_ids).update(
            review_state=Tool.ReviewState.CHANGED, updated_at=now
        )
    if reactivate:
        Tool.objects.filter(id__in=reactivate).update(
            active=True, deactivated_at=None, deactivated_reason="", updated_at=now
        )
    if deactivate:
        Tool.objects.filter(id__in=deactivate, active=True).update(
            active=False,
            deactivated_at=now,
            deactivated_reason=DEACTIVATED_REASON,
            updated_at=now,
        )
    effect_changes = _effect_changes(diff.items)
    for effect, ids in effect_changes.items():
        Tool.objects.filter(id__in=ids).update(effect=effect, updated_at=now)
    return ApplyOutcome(
        created=created,
        updated=len([i for i in spec_writes if i.change is Change.UPDATED]),
        reactivated=len(reactivate),
        deactivated=len(deactivate),
        effect_changed=sum(len(ids) for ids in effect_changes.values()),
        revisions=created + revisions,
        review_changed=len(review_ids),
    )


_SPEC_COLUMNS = (
    ("title", "text"),
    ("description", "text"),
    ("input_schema", "jsonb"),
    ("output_schema", "jsonb"),
    ("annotations", "jsonb"),
    ("icons", "jsonb"),
    ("execution", "jsonb"),
    ("meta", "jsonb"),
    ("spec_hash", "varchar"),
    ("current_revision", "integer"),
)


def _update_tool_specs(rows: Sequence[Tool], now: datetime) -> None:
    """Write new server-owned specs to existing rows, in bulk.

    On PostgreSQL one `UPDATE ... FROM jsonb_to_recordset(...)` per batch:
    Django's `bulk_update` builds a CASE expression per field and row, which
    cost ~1 s for 100 tools. SQLite (the embedded default) keeps bulk_update.
    """
    if connection.vendor != "postgresql":
        for row in rows:
            row.updated_at = now
        Tool.objects.bulk_update(
            rows,
            [*TOOL_SERVER_FIELDS, "spec_hash", "current_revision", "updated_at"],
            batch_size=BATCH,
        )
        return
    assignments = ", ".join(f"{name} = v.{name}" for name, _ in _SPEC_COLUMNS)
    record = ", ".join(
        f"{name} {kind}" for name, kind in (("id", "bigint"), *_SPEC_COLUMNS)
    )
    sql = (
        f"UPDATE {Tool._meta.db_table} AS t SET {assignments}, updated_at = %s "
        f"FROM jsonb_to_recordset(%s::jsonb) AS v({record}) WHERE t.id = v.id"
    )
    with connection.cursor() as cursor:
        for start in range(0, len(rows), BATCH):
            batch = [
                {
                    "id": row.pk,
                    **{name: getattr(row, name) for name, _ in _SPEC_COLUMNS},
                }
                for row in rows[start : start + BATCH]
            ]
            cursor.execute(sql, [now, json.dumps(batch)])


def _effect_changes(items: Sequence[ItemChange]) -> dict[str, list[int]]:
    changes: dict[str, list[int]] = {}
    for item in items:
        if (
            item.change is Change.ADDED
            or item.row_id is None
            or not item.effect_changes
        ):
            continue
        if item.action is Action.LEAVE_INACTIVE:
            continue
        assert item.effect_after is not None
        changes.setdefault(item.effect_after, []).append(item.row_id)
    return changes


def entries_apply(
    *,
    model: type[Prompt] | type[Resource],
    gateway: Gateway,
    diff: CatalogDiff,
    offered: Mapping[str, EntrySpec],
    now: datetime | None = None,
) -> ApplyOutcome:
    """Write a prompt or resource diff (same rules as tools, no revisions)."""
    now = now or timezone.now()
    key_field = "uri" if model is Resource else "name"

    def columns(entry: EntrySpec) -> dict[str, Any]:
        values: dict[str, Any] = {
            key_field: entry.key,
            "spec": dict(entry.spec),
            "spec_hash": entry.spec_hash,
        }
        if model is Resource:
            values["name"] = str(entry.spec.get("name", ""))[:200]
        return values

    added = [i for i in diff.items if i.action is Action.CREATE]
    model.objects.bulk_create(
        [model(gateway=gateway, **columns(offered[i.name])) for i in added],
        batch_size=BATCH,
    )
    writes = [i for i in diff.items if i.writes_spec and i.change is not Change.ADDED]
    update_fields = ["spec", "spec_hash", "updated_at"] + (
        ["name"] if model is Resource else []
    )
    objs: list[Model] = [
        model(pk=i.row_id, updated_at=now, **columns(offered[i.name])) for i in writes
    ]
    if objs:
        model.objects.bulk_update(objs, update_fields, batch_size=BATCH)
    reactivate = [i.row_id for i in diff.items if i.action is Action.REACTIVATE]
    deactivate = [i.row_id for i in diff.items if i.action is Action.DEACTIVATE]
    if reactivate:
        model.objects.filter(id__in=reactivate).update(
            active=True, deactivated_at=None, deactivated_reason="", updated_at=now
        )
    if deactivate and diff.complete:
        model.objects.filter(id__in=deactivate).update(
            active=False,
            deactivated_at=now,
            deactivated_reason=DEACTIVATED_REASON,
            updated_at=now,
        )
    return ApplyOutcome(
        created=len(added),
        updated=len([i for i in writes if i.change is Change.UPDATED]),
        reactivated=len(reactivate),
        deactivated=len(deactivate) if diff.complete else 0,
    )


def tool_update_local(*, tool: Tool, fields: Mapping[str, Any]) -> Tool:
    """Change locally-owned fields only; anything else is refused."""
    foreign = sorted(set(fields) - set(TOOL_LOCAL_FIELDS))
    if foreign:
        raise ToolServiceError(
            f"only locally-owned fields can be changed, not: {', '.join(foreign)}",
            code="not_locally_owned",
        )
    for name, value in fields.items():
        setattr(tool, name, value)
    tool.full_clean(exclude=["approved_revision", "approved_by"])
    tool.save(update_fields=[*fields, "updated_at"])
    return tool


class ToolRevisionMismatch(ToolServiceError):
    """The revision a reviewer saw is no longer the tool's current one."""

    def __init__(self, message: str, *, current: int, requested: int) -> None:
        super().__init__(message, code="revision_mismatch")
        self.current = current
        self.requested = requested


def tool_approve(*, tool: Tool, user: Any, revision: int | None = None) -> Tool:
    """Approve the tool's current revision (pin it).

    With `revision`, approve only if that is still the current revision: a
    reviewer never approves a definition they did not see.
    """
    with transaction.atomic():
        # Lock the gateway: an apply running now either lands first (and we
        # approve what it wrote) or waits for us (and marks the tool changed).
        Gateway.objects.select_for_update().only("id").get(pk=tool.gateway_id)
        locked = Tool.objects.get(pk=tool.pk)
        if revision is not None and revision != locked.current_revision:
            raise ToolRevisionMismatch(
                f"revision {revision} is no longer current (the tool is at "
                f"revision {locked.current_revision}); review the new one first",
                current=locked.current_revision,
                requested=revision,
            )
        revision = ToolRevision.objects.filter(
            tool=locked, number=locked.current_revision
        ).first()
        if revision is None:
            raise ToolServiceError(
                "the tool has no revision to approve", code="no_revision"
            )
        locked.approved_revision = revision
        locked.review_state = Tool.ReviewState.APPROVED
        locked.approved_at = timezone.now()
        locked.approved_by = user if getattr(user, "is_authenticated", False) else None
        locked.save(
            update_fields=[
                "approved_revision",
                "review_state",
                "approved_at",
                "approved_by",
                "updated_at",
            ]
        )
    return locked
