"""The skill registry: recompute, validate and record skills (SPEC 8).

`SkillRegistry(tenant=...)` refreshes one skill by name or all of a tenant's;
`skills.services` uses `refresh_ids` after writes and after every applied
catalog refresh. Every refresh locks the skills it records (in id order)
before it reads anything, then flattens them (`skills.resolve.flatten`),
validates every reference against the active tools and writes only the
outcomes that changed. The number of queries does not grow with the number of
skills or tools (refresh_all: five at most on PostgreSQL).
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from gateways.models import Tenant
from skills import selectors
from skills.exceptions import SkillNotFound
from skills.models import Skill
from skills.resolve import (
    FAILED,
    OK,
    SKIPPED,
    CatalogView,
    Outcome,
    SkillNode,
    catalog_view,
    flatten,
    judge,
    reference_candidates,
)

logger = logging.getLogger("toolsync.skills")

STATUS_OF = {
    OK: Skill.Status.OK,
    FAILED: Skill.Status.FAILED,
    SKIPPED: Skill.Status.SKIPPED,
}


def _immutable(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise TypeError("SkillRefreshResult is immutable")


class _FrozenList(list[str]):
    """A list that refuses changes, so a result stays what it was computed as."""

    append = extend = insert = remove = pop = clear = sort = reverse = _immutable  # type: ignore[assignment]
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _immutable  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_FrozenList, (list(self),))

    def __copy__(self) -> _FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _FrozenList:
        return self


class _FrozenDict(dict[str, str]):
    """A dict that refuses changes."""

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _immutable  # type: ignore[assignment]
    __ior__ = _immutable  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_FrozenDict, (dict(self),))

    def __copy__(self) -> _FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _FrozenDict:
        return self


@dataclass(frozen=True)
class SkillRefreshResult:
    """What a skills refresh concluded: names refreshed, failed (with why) and skipped.

    Immutable: the fields cannot be rebound and the list and dict refuse
    changes (they still compare equal to plain lists and dicts).
    """

    refreshed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Copies: a caller's later edits to what it passed in change nothing here.
        object.__setattr__(self, "refreshed", _FrozenList(self.refreshed))
        object.__setattr__(self, "failed", _FrozenDict(self.failed))
        object.__setattr__(self, "skipped", _FrozenList(self.skipped))

    @property
    def total_refreshed(self) -> int:
        return len(self.refreshed)

    @property
    def total_failed(self) -> int:
        return len(self.failed)

    @property
    def total_skipped(self) -> int:
        return len(self.skipped)

    def to_summary(self) -> str:
        """Exactly `refreshed: 3, failed: 1, skipped: 0`."""
        return (
            f"refreshed: {self.total_refreshed}, failed: {self.total_failed}, "
            f"skipped: {self.total_skipped}"
        )

    def merge(self, other: SkillRefreshResult) -> SkillRefreshResult:
        """A new result: lists concatenated (self first), dicts merged (other wins)."""
        return SkillRefreshResult(
            refreshed=[*self.refreshed, *other.refreshed],
            failed={**self.failed, **other.failed},
            skipped=[*self.skipped, *other.skipped],
        )

    @classmethod
    def merged(cls, results: Iterable[SkillRefreshResult]) -> SkillRefreshResult:
        """The same as folding `merge` left to right over `results`, in linear time."""
        refreshed: list[str] = []
        failed: dict[str, str] = {}
        skipped: list[str] = []
        for result in results:
            refreshed += result.refreshed
            failed.update(result.failed)
            skipped += result.skipped
        return cls(refreshed=refreshed, failed=failed, skipped=skipped)

    def to_dict(self) -> dict[str, Any]:
        """The `skills` section of a refresh report (plain JSON types)."""
        return {
            "summary": self.to_summary(),
            "refreshed": list(self.refreshed),
            "failed": dict(self.failed),
            "skipped": list(self.skipped),
        }


def _result_of(name: str, outcome: Outcome) -> SkillRefreshResult:
    if outcome.status == OK:
        return SkillRefreshResult(refreshed=[name])
    if outcome.status == FAILED:
        return SkillRefreshResult(failed={name: outcome.error})
    return SkillRefreshResult(skipped=[name])


@dataclass(frozen=True)
class _Change:
    id: int
    outcome: Outcome
    digest: str


@contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector during one allocation-heavy batch.

    Flattening 10,000 skills allocates hundreds of thousands of tuples, sets
    and strings; each burst set off full collections that walked every object
    in the process and doubled the refresh's time. What is allocated here
    forms no reference cycles, so reference counting still frees all of it;
    the collector is switched back on (if it was on) when the batch ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _digest(outcome: Outcome) -> str:
    # Names never hold control characters (validated), so the joins are unambiguous.
    text = "\x00".join(
        (
            outcome.status,
            outcome.error,
            "\x01".join(outcome.missing),
            "\x01".join(outcome.resolved),
        )
    )
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class SkillRegistry:
    """Refresh the skills of one tenant: `refresh(name)` or `refresh_all()`."""

    def __init__(self, *, tenant: Tenant | int) -> None:
        self.tenant_id = tenant if isinstance(tenant, int) else tenant.pk

    def refresh(self, name: str) -> SkillRefreshResult:
        """Recompute and validate one skill; raises SkillNotFound (`SKILL_NOT_FOUND`)."""
        with transaction.atomic():
            ids = list(
                Skill.objects.filter(tenant_id=self.tenant_id, name=name).values_list(
                    "pk", flat=True
                )
            )
            if not ids:
                raise SkillNotFound(name)
            result = self._refresh(
                selectors.skill_ids_lock(tenant_id=self.tenant_id, ids=ids)
            )
        self._log(f"skill {name}", result)
        return result

    def refresh_all(self) -> SkillRefreshResult:
        """Recompute and validate every skill of the tenant; the results merged."""
        with transaction.atomic():
            selectors.skill_ids_lock(tenant_id=self.tenant_id)
            result = self._refresh(None)
        self._log("all skills", result)
        return result

    def refresh_ids(
        self, ids: Collection[int], *, run_id: int | None = None, scope: str = ""
    ) -> SkillRefreshResult:
        """Recompute and validate the given skills (used by `skills.services`)."""
        if not ids:
            return SkillRefreshResult()
        with transaction.atomic():
            locked = selectors.skill_ids_lock(tenant_id=self.tenant_id, ids=ids)
            result = self._refresh(locked, run_id=run_id)
        self._log(scope or f"{len(ids)} skills", result)
        return result

    # -- internals -----------------------------------------------------------

    def _refresh(
        self, ids: Collection[int] | None, *, run_id: int | None = None
    ) -> SkillRefreshResult:
        """The caller holds the transaction and the row locks of `ids` (None: all)."""
        if ids is not None and not ids:
            return SkillRefreshResult()
        with _without_cyclic_gc():
            return self._compute_and_record(ids, run_id=run_id)

    def _compute_and_record(
        self, ids: Collection[int] | None, *, run_id: int | None
    ) -> SkillRefreshResult:
        rows = selectors.skill_rows(tenant_id=self.tenant_id, ids=ids)
        rows.sort(key=lambda r: r["name"])
        nodes: dict[str, SkillNode] = {
            r["name"]: selectors.node_from_row(r) for r in rows
        }
        if ids is not None:
            selectors.skill_nodes_below(
                tenant_id=self.tenant_id,
                known=nodes,
                names=[i for r in rows for i in nodes[r["name"]].includes],
            )
        flat = flatten(nodes, [r["name"] for r in rows])
        references = {t for r in rows for t in flat[r["name"]].tools}
        view = CatalogView()
        if references:
            gateways = selectors.gateway_states(tenant_id=self.tenant_id)
            separator = settings.TOOLSYNC_TOOL_SEPARATOR
            candidates = {
                ref: reference_candidates(ref, gateways, separator)
                for ref in references
            }
            pairs = {
                (g.id, tool) for options in candidates.values() for g, tool in options
            }
            view = catalog_view(
                references,
                candidates=candidates,
                active=selectors.active_tools_among(pairs),
            )
        changes: list[_Change] = []
        results: list[SkillRefreshResult] = []
        for row in rows:
            outcome = judge(flat[row["name"]], view)
            results.append(_result_of(row["name"], outcome))
            digest = _digest(outcome)
            if row["outcome_digest"] != digest:
                changes.append(_Change(row["id"], outcome, digest))
        if changes:
            _write(changes, now=timezone.now(), run_id=run_id)
        return SkillRefreshResult.merged(results)

    def _log(self, scope: str, result: SkillRefreshResult) -> None:
        logger.info(
            "skills refresh (tenant %s, %s): %s",
            self.tenant_id,
            scope,
            result.to_summary(),
            extra={
                "tenant_id": self.tenant_id,
                "refreshed": result.total_refreshed,
                "failed": result.total_failed,
                "skipped": result.total_skipped,
            },
        )


def _write(changes: list[_Change], *, now: datetime, run_id: int | None) -> None:
    """Write changed outcomes in bulk.

    On PostgreSQL one `UPDATE ... FROM jsonb_to_recordset(...)` whatever the
    number of rows (Django's bulk_update builds a CASE per field and row);
    SQLite (the embedded default) keeps bulk_update.
    """
    if connection.vendor != "postgresql":
        objs = [
            Skill(
                pk=c.id,
                status=STATUS_OF[c.outcome.status],
                error=c.outcome.error,
                missing=list(c.outcome.missing),
                resolved_tools=list(c.outcome.resolved),
                outcome_digest=c.digest,
                status_changed_at=now,
                status_run_id=run_id,
                updated_at=now,
            )
            for c in changes
        ]
        Skill.objects.bulk_update(
            objs,
            [
                "status",
                "error",
                "missing",
                "resolved_tools",
                "outcome_digest",
                "status_changed_at",
                "status_run_id",
                "updated_at",
            ],
            batch_size=500,
        )
        return
    payload = json.dumps(
        [
            {
                "id": c.id,
                "status": STATUS_OF[c.outcome.status],
                "error": c.outcome.error,
                "missing": c.outcome.missing,
                "resolved_tools": c.outcome.resolved,
                "outcome_digest": c.digest,
            }
            for c in changes
        ]
    )
    sql = (
        f"UPDATE {Skill._meta.db_table} AS s SET status = v.status, error = v.error, "
        "missing = v.missing, resolved_tools = v.resolved_tools, "
        "outcome_digest = v.outcome_digest, "
        "status_changed_at = %s, status_run_id = %s, updated_at = %s "
        "FROM jsonb_to_recordset(%s::jsonb) AS v(id bigint, status text, error text, "
        "missing jsonb, resolved_tools jsonb, outcome_digest text) WHERE s.id = v.id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [now, run_id, now, payload])
