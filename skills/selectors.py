"""Reads of skills, shaped for the refresh engine, the registry and the API."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import F, QuerySet

from gateways.models import Gateway
from skills.models import Skill, SkillReference, SkillRevision
from skills.resolve import GatewayState, SkillNode
from tools.models import Tool

# Largest IN list sent in one query; bigger sets are split (SQLite's
# parameter limit, and plans stay sane on PostgreSQL).
CHUNK = 5000

NODE_COLUMNS = ("id", "name", "current_revision__tools", "current_revision__includes")


def _chunks(values: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def qualified_tool_name(prefix: str, name: str) -> str:
    return f"{prefix}{settings.TOOLSYNC_TOOL_SEPARATOR}{name}"


def skill_revisions_naming(
    *, gateway: Gateway, tool_names: Iterable[str]
) -> dict[str, list[str]]:
    """For each tool name of `gateway`, the skill revisions (current and older) naming it.

    Keys are plain tool names; values are labels like `acme/triage@3`, by
    skill name then revision number. Names no revision mentions are absent.
    One query (per 5,000 names) however many skills there are.
    """
    by_reference = {qualified_tool_name(gateway.prefix, n): n for n in tool_names}
    found: dict[str, list[tuple[str, int]]] = {}
    for chunk in _chunks(list(by_reference)):
        rows = SkillReference.objects.filter(
            tenant_id=gateway.tenant_id,
            kind=SkillReference.Kind.TOOL,
            target__in=chunk,
        ).values_list("target", "skill__name", "revision__number")
        for target, skill_name, number in rows:
            found.setdefault(by_reference[target], []).append((skill_name, number))
    return {
        name: [f"{skill}@{number}" for skill, number in sorted(labels)]
        for name, labels in found.items()
    }


def skill_ids_naming_gateway(*, gateway: Gateway) -> dict[int, str]:
    """Skills whose current revision names any tool of `gateway` (present or not), id -> name."""
    prefix = qualified_tool_name(gateway.prefix, "")
    rows = (
        SkillReference.objects.filter(
            tenant_id=gateway.tenant_id,
            kind=SkillReference.Kind.TOOL,
            target__startswith=prefix,
            skill__current_revision_id=F("revision_id"),
        )
        .values_list("skill_id", "skill__name")
        .distinct()
    )
    return dict(rows)


def skill_ids_including(*, tenant_id: int, names: Collection[str]) -> dict[int, str]:
    """Skills whose current revision includes any of `names`, at any depth, id -> name.

    One query per level of includes (a skill is visited once, so cycles end).
    """
    found: dict[int, str] = {}
    seen = set(names)
    frontier = list(names)
    while frontier:
        level: dict[int, str] = {}
        for chunk in _chunks(frontier):
            level.update(
                SkillReference.objects.filter(
                    tenant_id=tenant_id,
                    kind=SkillReference.Kind.INCLUDE,
                    target__in=chunk,
                    skill__current_revision_id=F("revision_id"),
                ).values_list("skill_id", "skill__name")
            )
        frontier = [n for i, n in level.items() if i not in found and n not in seen]
        found.update(level)
        seen.update(frontier)
    return found


def skill_ids_lock(*, tenant_id: int, ids: Collection[int] | None = None) -> list[int]:
    """Lock skill rows (all of the tenant's, or `ids`) in id order; returns the ids.

    Every writer of a skill's status takes these row locks first, in id
    order, so two refreshes that touch the same skills queue instead of
    deadlocking, and the later one computes from what the earlier committed.
    """
    qs = Skill.objects.select_for_update().filter(tenant_id=tenant_id).order_by("pk")
    if ids is None:
        return list(qs.values_list("pk", flat=True))
    locked: list[int] = []
    for chunk in _chunks(sorted(ids)):
        locked += qs.filter(pk__in=chunk).values_list("pk", flat=True)
    return locked


def skill_rows(
    *, tenant_id: int, ids: Collection[int] | None = None
) -> list[dict[str, Any]]:
    """Skills with their current content and outcome digest (all of the tenant's, or `ids`).

    A plain cursor: the ORM's per-row converters cost more than the rest of a
    10,000-skill refresh's reads together. JSON arrives as text on both
    backends and is decoded here.
    """
    skill = connection.ops.quote_name(Skill._meta.db_table)
    revision = connection.ops.quote_name(SkillRevision._meta.db_table)
    sql = (
        f"SELECT s.id, s.name, s.outcome_digest, r.tools, r.includes FROM {skill} AS s "
        f"LEFT JOIN {revision} AS r ON r.id = s.current_revision_id "
        "WHERE s.tenant_id = %s"
    )
    batches: list[tuple[str, list[Any]]] = []
    if ids is None:
        batches.append((sql, [tenant_id]))
    for chunk in _chunks(sorted(ids or ())):
        marks = ", ".join(["%s"] * len(chunk))
        batches.append((f"{sql} AND s.id IN ({marks})", [tenant_id, *chunk]))
    rows: list[dict[str, Any]] = []
    with connection.cursor() as cursor:
        for query, params in batches:
            cursor.execute(query, params)
            rows += [
                {
                    "id": pk,
                    "name": name,
                    "outcome_digest": digest,
                    "current_revision__tools": _json_list(tools),
                    "current_revision__includes": _json_list(includes),
                }
                for pk, name, digest, tools, includes in cursor.fetchall()
            ]
    return rows


def _json_list(value: Any) -> list[str]:
    if value is None:
        return []
    return list(json.loads(value) if isinstance(value, str | bytes) else value)


def node_from_row(row: dict[str, Any]) -> SkillNode:
    return SkillNode(
        name=row["name"],
        tools=tuple(row["current_revision__tools"] or ()),
        includes=tuple(row["current_revision__includes"] or ()),
    )


def skill_nodes_below(
    *, tenant_id: int, known: dict[str, SkillNode], names: Iterable[str]
) -> dict[str, SkillNode]:
    """Add to `known` every skill that `names` include, at any depth; one query per level."""
    frontier = [n for n in dict.fromkeys(names) if n not in known]
    missing: set[str] = set()
    while frontier:
        loaded: list[SkillNode] = []
        for chunk in _chunks(frontier):
            loaded += [
                node_from_row(row)
                for row in Skill.objects.filter(
                    tenant_id=tenant_id, name__in=chunk
                ).values(*NODE_COLUMNS)
            ]
        missing.update(set(frontier) - {n.name for n in loaded})
        for node in loaded:
            known[node.name] = node
        frontier = list(
            dict.fromkeys(
                i
                for node in loaded
                for i in node.includes
                if i not in known and i not in missing
            )
        )
    return known


def gateway_states(*, tenant_id: int) -> dict[str, GatewayState]:
    """Every gateway of the tenant by prefix, with its last catalog completeness."""
    return {
        prefix: GatewayState(id=pk, prefix=prefix, complete=complete)
        for pk, prefix, complete in Gateway.objects.filter(
            tenant_id=tenant_id
        ).values_list("id", "prefix", "last_catalog_complete")
    }


def active_tools_among(pairs: Collection[tuple[int, str]]) -> set[tuple[int, str]]:
    """Which (gateway id, tool name) pairs are active tools.

    On PostgreSQL one query joins the pairs as two arrays against the
    unique (gateway, name) index, whatever their number; elsewhere a query
    per gateway and 5,000 names.
    """
    if not pairs:
        return set()
    if connection.vendor == "postgresql":
        # The pairs travel as two delimited strings split server-side: any
        # number in one query, and 4x cheaper than binding two arrays. Names
        # here are validated references: no commas or newlines.
        sql = (
            f"SELECT t.gateway_id, t.name FROM {Tool._meta.db_table} AS t "
            "JOIN unnest(string_to_array(%s, ',')::bigint[], "
            "string_to_array(%s, E'\\n')) AS r(gateway_id, name) "
            "ON t.gateway_id = r.gateway_id AND t.name = r.name WHERE t.active"
        )
        ordered = [(g, n) for g, n in pairs if "," not in n and "\n" not in n]
        with connection.cursor() as cursor:
            cursor.execute(
                sql,
                [
                    ",".join(str(g) for g, _ in ordered),
                    "\n".join(n for _, n in ordered),
                ],
            )
            return {(g, n) for g, n in cursor.fetchall()}
    by_gateway: dict[int, list[str]] = {}
    for gateway_id, name in pairs:
        by_gateway.setdefault(gateway_id, []).append(name)
    active: set[tuple[int, str]] = set()
    for gateway_id, names in by_gateway.items():
        for chunk in _chunks(names):
            active.update(
                Tool.objects.filter(
                    gateway_id=gateway_id, active=True, name__in=chunk
                ).values_list("gateway_id", "name")
            )
    return active


def skill_list(*, tenant_ids: Iterable[int] | None = None) -> QuerySet[Skill]:
    """Skills (of the given tenants, or all) with current revision and tenant joined."""
    qs = Skill.objects.select_related("current_revision", "tenant").order_by(
        "tenant_id", "name"
    )
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    return qs


def skill_revision_list(*, skill: Skill) -> QuerySet[SkillRevision]:
    """A skill's revisions, newest first, with their authors."""
    return (
        SkillRevision.objects.filter(skill=skill)
        .select_related("author")
        .order_by("-number")
    )
