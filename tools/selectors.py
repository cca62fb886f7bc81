"""Reads of the catalog, shaped for the refresh engine and the API."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import F, QuerySet

from tools.models import TOOL_SERVER_FIELDS, Prompt, Resource, Tool, ToolRevision

# Columns the diff needs for every row; schemas are loaded only for rows
# whose hash differs (see `tool_specs`), so a no-op refresh reads no JSON.
TOOL_LIGHT_COLUMNS = (
    "id",
    "name",
    "spec_hash",
    "active",
    "effect",
    "review_state",
    "current_revision",
)


def tool_rows_light(*, gateway_id: int) -> list[dict[str, Any]]:
    """Every tool row of a gateway (active or not), without its spec."""
    return list(Tool.objects.filter(gateway_id=gateway_id).values(*TOOL_LIGHT_COLUMNS))


def tool_specs(*, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """Server-owned specs (MCP wire form) of the given tool rows, by id."""
    wanted = list(ids)
    specs: dict[int, dict[str, Any]] = {}
    columns = ("id", "name", *TOOL_SERVER_FIELDS)
    for start in range(0, len(wanted), 5000):
        chunk = wanted[start : start + 5000]
        for row in Tool.objects.filter(id__in=chunk).values(*columns):
            spec: dict[str, Any] = {"name": row["name"]}
            for attr, key in TOOL_SERVER_FIELDS.items():
                if row[attr] is not None:
                    spec[key] = row[attr]
            specs[row["id"]] = spec
    return specs


def tool_list_current(*, gateway_id: int) -> QuerySet[Tool]:
    """Active tools of a gateway, with the gateway joined (qualified names)."""
    return Tool.objects.filter(gateway_id=gateway_id, active=True).select_related(
        "gateway"
    )


def entry_rows(
    *, model: type[Prompt] | type[Resource], gateway_id: int
) -> list[dict[str, Any]]:
    """Every prompt or resource row of a gateway, with its spec."""
    key = "uri" if model is Resource else "name"
    return list(
        model.objects.filter(gateway_id=gateway_id).values(
            "id", key, "spec", "spec_hash", "active"
        )
    )


def tool_list_api() -> QuerySet[Tool]:
    """Tools as the API shows them, with their gateway's prefix, transport, auth.

    One query per page however many rows (the serializer reads only these).
    """
    # Annotations, not select_related: a page of 1,000 tools must not carry
    # 1,000 copies of the gateway's JSON columns (capabilities, server info).
    return Tool.objects.annotate(
        gateway_prefix=F("gateway__prefix"),
        gateway_transport=F("gateway__transport"),
        gateway_auth_type=F("gateway__auth_type"),
        approved_revision_number=F("approved_revision__number"),
    ).order_by("gateway_id", "name", "id")


def tool_revision_list(*, tool: Tool) -> QuerySet[ToolRevision]:
    """A tool's revisions, newest first."""
    return ToolRevision.objects.filter(tool=tool).order_by("-number")
