"""Turn a diff and what apply did into the JSON report of SPEC 6, and render it.

Pure except for `render_report_text`, which uses the Django template engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from refresh.diff import Action, CatalogDiff, Change, ItemChange

SUMMARY_KEYS = (
    "added",
    "updated",
    "unchanged",
    "returning",
    "disappeared",
    "skipped",
    "deactivated",
    "reactivated",
)


@dataclass(frozen=True)
class ReportContext:
    """Facts about the run that the diff does not know."""

    run_id: int | None
    gateway_id: int
    prefix: str
    source: str
    trigger: str
    applied: bool
    apply_requested: bool
    duration_ms: int = 0
    protocol_version: str = ""
    stale_preview: bool = False


def item_json(item: ItemChange) -> dict[str, Any]:
    return {
        "name": item.name,
        "change": str(item.change),
        "changed_fields": list(item.changed_fields),
        "before": dict(item.before) if item.before is not None else None,
        "after": dict(item.after) if item.after is not None else None,
        "effect_hint": item.effect_hint,
        "effect": item.effect,
        "effect_after": item.effect_after,
        "action": str(item.action),
        "requires_review": item.requires_review,
        "referenced_by": list(item.referenced_by),
    }


def summarize(diff: CatalogDiff, *, applied: bool) -> dict[str, int]:
    """The summary counts; `deactivated`/`reactivated` count what was done."""
    counts = diff.counts()
    summary = {key: counts.get(key, 0) for key in SUMMARY_KEYS}
    done = applied
    summary["deactivated"] = (
        sum(1 for i in diff.items if i.action is Action.DEACTIVATE) if done else 0
    )
    summary["reactivated"] = (
        sum(1 for i in diff.items if i.action is Action.REACTIVATE) if done else 0
    )
    summary["unseen"] = counts["unseen"]
    summary["requires_review"] = (
        sum(1 for i in diff.items if i.requires_review) if done else 0
    )
    summary["effect_changed"] = (
        sum(
            1
            for i in diff.items
            if i.change is not Change.ADDED and i.effect_changes and i.writes
        )
        if done
        else 0
    )
    return summary


def entries_section(
    diff: CatalogDiff | None, note: str | None, *, applied: bool
) -> dict[str, Any]:
    """The `prompts` / `resources` section of a report."""
    if diff is None:
        return {"read": False, "note": note or "not read"}
    return {
        "read": True,
        "complete": diff.complete,
        "incomplete_reason": diff.incomplete_reason,
        "summary": summarize(diff, applied=applied),
        "items": [item_json(i) for i in diff.items if i.change is not Change.UNCHANGED],
        "skipped": [{"name": s.name, "reason": s.reason} for s in diff.skipped],
    }


def build_report(
    diff: CatalogDiff,
    context: ReportContext,
    *,
    prompts: Mapping[str, Any] | None = None,
    resources: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The full `ToolRefreshReport` (SPEC 6)."""
    summary = summarize(diff, applied=context.applied)
    report: dict[str, Any] = {
        "run_id": context.run_id,
        "gateway_id": context.gateway_id,
        "prefix": context.prefix,
        "source": context.source,
        "trigger": context.trigger,
        "applied": context.applied,
        "complete": diff.complete,
        "protocol_version": context.protocol_version,
        "duration_ms": context.duration_ms,
        "summary": summary,
        "items": [item_json(i) for i in diff.items],
        "skipped": [{"name": s.name, "reason": s.reason} for s in diff.skipped],
        "note": compose_note(diff, summary, context),
    }
    if not diff.complete:
        report["incomplete_reason"] = diff.incomplete_reason
    if context.stale_preview:
        report["stale_preview"] = True
    if prompts is not None:
        report["prompts"] = dict(prompts)
    if resources is not None:
        report["resources"] = dict(resources)
    return report


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def compose_note(
    diff: CatalogDiff, summary: Mapping[str, int], context: ReportContext
) -> str:
    """One plain sentence: what happened, what was not done and why."""
    moved = [
        f"{summary[k]} {label}"
        for k, label in (
            ("added", "added"),
            ("updated", "updated"),
            ("returning", "returning"),
            ("disappeared", "disappeared"),
        )
        if summary[k]
    ]
    what = _join(moved) if moved else "no changes"
    if summary["skipped"]:
        what += f" ({_count(summary['skipped'], 'entry')} skipped as invalid)"
    caveats: list[str] = []
    if not diff.complete:
        caveats.append(
            f"the listing was incomplete ({diff.incomplete_reason}), so nothing was treated as "
            f"disappeared and {_count(len(diff.unseen), 'tool')} not seen were left as they are"
        )
    if context.stale_preview:
        head = f"Not applied: the server's catalog changed since the preview; it now shows {what}"
        return _finish(head, caveats)
    if not context.applied:
        reason = (
            "apply was not requested"
            if not context.apply_requested
            else "the refresh did not get to apply"
        )
        head = f"Dry run: {what}; nothing in the catalog was written because {reason}"
        return _finish(head, caveats)
    done: list[str] = []
    if summary["added"]:
        done.append(
            f"{_count(summary['added'], 'new tool')} created gated as write, pending review"
        )
    if summary["updated"]:
        done.append(f"{_count(summary['updated'], 'tool')} updated")
    if summary["reactivated"]:
        done.append(f"{summary['reactivated']} reactivated")
    if summary["deactivated"]:
        done.append(f"{summary['deactivated']} deactivated")
    if summary["effect_changed"]:
        done.append(
            f"{_count(summary['effect_changed'], 'effect')} changed from server hints"
        )
    head = (
        f"Applied: {_join(done)}"
        if done
        else "Applied: the catalog was already up to date"
    )
    left_active = sum(1 for i in diff.items if i.action is Action.LEAVE_ACTIVE)
    if left_active:
        caveats.append(
            f"{_count(left_active, 'disappeared tool')} kept active because deactivate_missing was off"
        )
    left_inactive = sum(1 for i in diff.items if i.action is Action.LEAVE_INACTIVE)
    if left_inactive:
        caveats.append(
            f"{_count(left_inactive, 'returning tool')} left inactive because "
            "reactivate_returning was off"
        )
    if summary["requires_review"]:
        caveats.append(
            f"{_count(summary['requires_review'], 'approved tool')} now need re-approval"
        )
    return _finish(head, caveats)


def _finish(head: str, caveats: list[str]) -> str:
    if caveats:
        return f"{head}; {'; '.join(caveats)}."
    return f"{head}."


def render_report_text(report: Mapping[str, Any]) -> str:
    """A readable text rendering (CLI), through `templates/refresh/report.txt`."""
    from django.template.loader import render_to_string

    order = {str(c): n for n, c in enumerate(Change)}
    items = sorted(
        report.get("items", []), key=lambda i: (order.get(i["change"], 9), i["name"])
    )
    shown = [i for i in items if i["change"] != str(Change.UNCHANGED)]
    width = max([len(i["name"]) for i in shown] + [4])
    rows = [
        {
            "name": i["name"].ljust(width),
            "change": i["change"].ljust(11),
            "action": i["action"].ljust(14),
            "effect": f"{i.get('effect') or '-'}->{i.get('effect_after') or '-'} "
            f"(hint {i.get('effect_hint') or '-'})",
            "fields": ", ".join(i.get("changed_fields") or []),
            "refs": ", ".join(i.get("referenced_by") or []),
        }
        for i in shown
    ]
    return render_to_string(
        "refresh/report.txt",
        {
            "report": report,
            "rows": rows,
            "unchanged": sum(1 for i in items if i["change"] == str(Change.UNCHANGED)),
            "summary": report.get("summary", {}),
        },
    )
