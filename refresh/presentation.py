"""Shape refresh reports and tool revisions for the admin: grouping and diffs.

Pure functions over the plain JSON that `refresh.report` stores; nothing here
touches the ORM or builds HTML. The templates render these views with
autoescaping on, because every string here may come from an MCP server and
is untrusted: nothing in this module is ever marked safe.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from refresh.diff import FIELD_NAMES

# Display order of change kinds: what moves first, the unchanged bulk last.
CHANGE_ORDER: tuple[str, ...] = (
    "added",
    "updated",
    "returning",
    "disappeared",
    "unchanged",
)
CHANGE_LABELS: dict[str, str] = {
    "added": "Added",
    "updated": "Updated",
    "returning": "Returning",
    "disappeared": "Disappeared",
    "unchanged": "Unchanged",
}
ACTION_LABELS: dict[str, str] = {
    "create": "create it (write, gated, pending review)",
    "update": "write a new revision",
    "none": "nothing",
    "reactivate": "reactivate it",
    "leave_inactive": "leave it inactive (reactivate_returning is off)",
    "deactivate": "deactivate it",
    "leave_active": "keep it active (deactivate_missing is off)",
}
SUMMARY_CARDS: tuple[tuple[str, str], ...] = (
    ("added", "Added"),
    ("updated", "Updated"),
    ("returning", "Returning"),
    ("disappeared", "Disappeared"),
    ("unchanged", "Unchanged"),
    ("skipped", "Skipped"),
)
DONE_CARDS: tuple[tuple[str, str], ...] = (
    ("deactivated", "Deactivated"),
    ("reactivated", "Reactivated"),
    ("requires_review", "Need re-approval"),
    ("effect_changed", "Effects changed"),
)
# Server-owned fields shown as text (word diff); everything else is JSON.
TEXT_FIELDS = frozenset({"name", "title", "description", "uri", "mime_type"})
# Order of server-owned fields on a revision comparison.
SPEC_FIELD_ORDER: tuple[str, ...] = (
    "name",
    "title",
    "description",
    "input_schema",
    "output_schema",
    "annotations",
    "icons",
    "execution",
    "meta",
)
SAFE_ICON_SCHEMES = frozenset({"http", "https"})

# Caps keep a 10,000-tool first import renderable; what is cut is still listed
# by name, and the stored report keeps everything.
ITEM_LIMIT = 200
PATH_LIMIT = 200
VALUE_CHARS = 300
TEXT_TOKEN_LIMIT = 20_000

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKENS = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)


# -- text ---------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A run of text that is equal in both versions, or only in one."""

    kind: str  # "equal" | "insert" | "delete"
    text: str


def _tokens(text: str) -> list[str]:
    return _TOKENS.findall(text)


def text_diff(before: str | None, after: str | None) -> list[Segment]:
    """A word-level diff of two strings, as segments in reading order.

    `None` (the field is absent) diffs like the empty string. Very long texts
    fall back to whole lines so the comparison stays cheap.
    """
    a, b = before or "", after or ""
    if a == b:
        return [Segment("equal", a)] if a else []
    ta, tb = _tokens(a), _tokens(b)
    if len(ta) + len(tb) > TEXT_TOKEN_LIMIT:
        ta, tb = a.splitlines(keepends=True), b.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
    segments: list[Segment] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            _append(segments, "equal", "".join(ta[i1:i2]))
            continue
        if tag in ("delete", "replace"):
            _append(segments, "delete", "".join(ta[i1:i2]))
        if tag in ("insert", "replace"):
            _append(segments, "insert", "".join(tb[j1:j2]))
    return segments


def _append(segments: list[Segment], kind: str, text: str) -> None:
    if not text:
        return
    if segments and segments[-1].kind == kind:
        segments[-1] = Segment(kind, segments[-1].text + text)
    else:
        segments.append(Segment(kind, text))


# -- JSON ---------------------------------------------------------------------


@dataclass(frozen=True)
class PathChange:
    """One leaf that differs between two JSON values, by JSONPath."""

    path: str
    kind: str  # "added" | "removed" | "changed"
    before: str | None  # compact JSON, cut to VALUE_CHARS
    after: str | None


def json_path(parts: Sequence[str | int]) -> str:
    """`$.properties.limit` / `$["odd key"][0]` for a sequence of keys and indices."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def compact(value: Any, limit: int = VALUE_CHARS) -> str:
    """Compact, key-sorted JSON of a value, cut to `limit` characters."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any) -> str:
    """Indented, key-sorted JSON (what the side-by-side view compares)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2)


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    # JSON equality, not Python's: True is not 1 and 1 is not 1.0 here.
    return type(a) is type(b) and a == b


def json_path_diff(
    before: Any, after: Any, *, limit: int = PATH_LIMIT
) -> tuple[list[PathChange], int]:
    """Leaves that differ between two JSON values, and how many were cut.

    Objects are compared key by key and arrays index by index; a value whose
    type changes (an object becoming a string, say) is one `changed` entry.
    Absent (`None` at the top) compares like a missing value.
    """
    changes: list[PathChange] = []
    total = 0

    def record(parts: list[str | int], a: Any, b: Any) -> None:
        nonlocal total
        total += 1
        if len(changes) >= limit:
            return
        if a is _MISSING:
            changes.append(PathChange(json_path(parts), "added", None, compact(b)))
        elif b is _MISSING:
            changes.append(PathChange(json_path(parts), "removed", compact(a), None))
        else:
            changes.append(
                PathChange(json_path(parts), "changed", compact(a), compact(b))
            )

    def walk(parts: list[str | int], a: Any, b: Any) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str):
                walk([*parts, str(key)], a.get(key, _MISSING), b.get(key, _MISSING))
        elif isinstance(a, list) and isinstance(b, list):
            for index in range(max(len(a), len(b))):
                walk(
                    [*parts, index],
                    a[index] if index < len(a) else _MISSING,
                    b[index] if index < len(b) else _MISSING,
                )
        elif a is _MISSING and b is _MISSING:
            return
        elif a is _MISSING and isinstance(b, dict | list) and b:
            walk(parts, {} if isinstance(b, dict) else [], b)
        elif b is _MISSING and isinstance(a, dict | list) and a:
            walk(parts, a, {} if isinstance(a, dict) else [])
        elif not _same(a, b):
            record(parts, a, b)

    walk(
        [],
        _MISSING if before is None else before,
        _MISSING if after is None else after,
    )
    return changes, max(0, total - len(changes))


@dataclass(frozen=True)
class SideBySideRow:
    """One row of a two-column comparison of pretty-printed JSON."""

    kind: str  # "equal" | "changed" | "removed" | "added" | "skip"
    left_no: int | None
    left: str
    right_no: int | None
    right: str


def side_by_side(before: Any, after: Any, *, context: int = 3) -> list[SideBySideRow]:
    """Line-aligned rows of two JSON values; long equal runs fold to `skip` rows."""
    left = pretty(before).splitlines() if before is not None else []
    right = pretty(after).splitlines() if after is not None else []
    rows: list[SideBySideRow] = []
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            span = i2 - i1
            keep = range(span)
            if span > 2 * context + 1:
                keep = [*range(context), *range(span - context, span)]
            previous = -1
            for k in keep:
                if k != previous + 1:
                    skipped = k - previous - 1
                    rows.append(
                        SideBySideRow(
                            "skip", None, f"{skipped} unchanged lines", None, ""
                        )
                    )
                rows.append(
                    SideBySideRow(
                        "equal", i1 + k + 1, left[i1 + k], j1 + k + 1, right[j1 + k]
                    )
                )
                previous = k
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            li, rj = i1 + k, j1 + k
            has_left, has_right = li < i2, rj < j2
            kind = (
                "changed"
                if has_left and has_right
                else "removed"
                if has_left
                else "added"
            )
            rows.append(
                SideBySideRow(
                    kind,
                    li + 1 if has_left else None,
                    left[li] if has_left else "",
                    rj + 1 if has_right else None,
                    right[rj] if has_right else "",
                )
            )
    return rows


# -- icons --------------------------------------------------------------------


@dataclass(frozen=True)
class IconView:
    """An MCP icon. `show_image` only for plain http(s) sources."""

    src: str
    show_image: bool
    mime_type: str
    sizes: str


def icon_is_safe(src: Any) -> bool:
    """Whether an icon source may become an `<img src>`: http(s) and nothing odd."""
    if not isinstance(src, str) or not src or len(src) > 2000:
        return False
    if any(ch.isspace() or ord(ch) < 32 or ch in "\"'<>`\\" for ch in src):
        return False
    try:
        parts = urlsplit(src)
    except ValueError:
        return False
    return parts.scheme.lower() in SAFE_ICON_SCHEMES and bool(parts.netloc)


def icon_views(icons: Any) -> list[IconView]:
    """Icons of a spec as views; malformed entries still show, as text."""
    if not isinstance(icons, list):
        return []
    views = []
    for icon in icons[:20]:
        if not isinstance(icon, dict):
            views.append(IconView(compact(icon, 200), False, "", ""))
            continue
        src = icon.get("src")
        sizes = icon.get("sizes")
        views.append(
            IconView(
                src=src if isinstance(src, str) else compact(src, 200),
                show_image=icon_is_safe(src),
                mime_type=str(icon.get("mimeType") or "")[:100],
                sizes=" ".join(str(s) for s in sizes)[:100]
                if isinstance(sizes, list)
                else str(sizes or "")[:100],
            )
        )
    return views


# -- fields -------------------------------------------------------------------


@dataclass(frozen=True)
class FieldDiff:
    """How one server-owned field moved, in the form that suits its kind."""

    name: str
    kind: str  # "text" | "json" | "icons"
    segments: list[Segment] = field(default_factory=list)
    paths: list[PathChange] = field(default_factory=list)
    more_paths: int = 0
    before_icons: list[IconView] = field(default_factory=list)
    after_icons: list[IconView] = field(default_factory=list)
    before_text: str = ""
    after_text: str = ""
    rows: list[SideBySideRow] = field(default_factory=list)
    changed: bool = True


def snake_keys(values: Mapping[str, Any] | None) -> dict[str, Any]:
    """Wire (camelCase) keys to the snake_case field names; snake keys pass through."""
    return {FIELD_NAMES.get(k, k): v for k, v in (values or {}).items()}


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else compact(value, 10_000)


def field_diff(name: str, before: Any, after: Any, *, rows: bool = False) -> FieldDiff:
    """The diff of one field: words for text, JSON paths otherwise, icons as icons."""
    changed = not _same(before, after)
    if name in TEXT_FIELDS:
        return FieldDiff(
            name=name,
            kind="text",
            segments=text_diff(_as_text(before), _as_text(after)),
            before_text=_as_text(before),
            after_text=_as_text(after),
            changed=changed,
        )
    paths, more = json_path_diff(before, after)
    return FieldDiff(
        name=name,
        kind="icons" if name == "icons" else "json",
        paths=paths,
        more_paths=more,
        before_icons=icon_views(before) if name == "icons" else [],
        after_icons=icon_views(after) if name == "icons" else [],
        rows=side_by_side(before, after) if rows else [],
        changed=changed,
    )


# -- report items ---------------------------------------------------------------


@dataclass(frozen=True)
class SpecView:
    """A whole spec at a glance (added and disappeared items)."""

    title: str
    description: str
    icons: list[IconView]
    json: str


@dataclass(frozen=True)
class ItemView:
    """One report item, ready for a table row."""

    name: str
    change: str
    action: str
    action_label: str
    changed_fields: list[str]
    effect: str | None
    effect_hint: str | None
    effect_after: str | None
    effect_moves: bool
    hint_differs: bool
    requires_review: bool
    referenced_by: list[str]
    diffs: list[FieldDiff]
    spec: SpecView | None


def spec_view(spec: Mapping[str, Any] | None) -> SpecView | None:
    if not spec:
        return None
    values = snake_keys(spec)
    return SpecView(
        title=_as_text(values.get("title")),
        description=_as_text(values.get("description")),
        icons=icon_views(values.get("icons")),
        json=pretty(dict(spec)),
    )


def item_view(item: Mapping[str, Any]) -> ItemView:
    """A report item (SPEC 3.3) with a readable diff of what moved."""
    change = str(item.get("change", ""))
    action = str(item.get("action", ""))
    before, after = snake_keys(item.get("before")), snake_keys(item.get("after"))
    fields = [str(f) for f in item.get("changed_fields") or []]
    diffs: list[FieldDiff] = []
    spec: SpecView | None = None
    if change == "added":
        spec = spec_view(item.get("after"))
    elif change == "disappeared":
        spec = spec_view(item.get("before"))
    else:
        diffs = [field_diff(f, before.get(f), after.get(f)) for f in fields]
    effect, hint = item.get("effect"), item.get("effect_hint")
    effect_after = item.get("effect_after")
    return ItemView(
        name=str(item.get("name", "")),
        change=change,
        action=action,
        action_label=ACTION_LABELS.get(action, action),
        changed_fields=fields,
        effect=effect,
        effect_hint=hint,
        effect_after=effect_after,
        effect_moves=bool(effect and effect_after and effect != effect_after),
        hint_differs=bool(hint and (effect_after or effect) != hint),
        requires_review=bool(item.get("requires_review")),
        referenced_by=[str(r) for r in item.get("referenced_by") or []],
        diffs=diffs,
        spec=spec,
    )


@dataclass(frozen=True)
class Group:
    """The items of one change kind; past the cap only names are kept."""

    change: str
    label: str
    total: int
    items: list[ItemView]
    more_names: list[str]


def group_items(
    items: Iterable[Mapping[str, Any]], *, limit: int = ITEM_LIMIT
) -> list[Group]:
    """Items grouped by change kind in `CHANGE_ORDER`, names sorted, empty kinds left out.

    Unchanged items are listed by name only: there is nothing to diff.
    """
    by_change: dict[str, list[Mapping[str, Any]]] = {}
    for item in items:
        by_change.setdefault(str(item.get("change", "")), []).append(item)
    order = [*CHANGE_ORDER, *sorted(set(by_change) - set(CHANGE_ORDER))]
    groups = []
    for change in order:
        members = sorted(by_change.get(change, []), key=lambda i: str(i.get("name")))
        if not members:
            continue
        shown = [] if change == "unchanged" else members[:limit]
        rest = members if change == "unchanged" else members[limit:]
        groups.append(
            Group(
                change=change,
                label=CHANGE_LABELS.get(change, change.title()),
                total=len(members),
                items=[item_view(i) for i in shown],
                more_names=[str(i.get("name", "")) for i in rest],
            )
        )
    return groups


# -- whole reports -------------------------------------------------------------


@dataclass(frozen=True)
class Card:
    key: str
    label: str
    count: int


@dataclass(frozen=True)
class Skipped:
    name: str
    reason: str


@dataclass(frozen=True)
class SectionView:
    """The prompts or resources section of a report."""

    kind: str
    read: bool
    note: str
    complete: bool
    incomplete_reason: str
    cards: list[Card]
    groups: list[Group]
    skipped: list[Skipped]


@dataclass(frozen=True)
class SkillsView:
    summary: str
    refreshed: list[str]
    failed: list[tuple[str, str]]
    skipped: list[str]
    error: str


@dataclass(frozen=True)
class ReportView:
    """Everything the report template shows."""

    has_report: bool
    applied: bool
    complete: bool
    incomplete_reason: str
    stale_preview: bool
    note: str
    error: str
    cards: list[Card]
    done_cards: list[Card]
    groups: list[Group]
    skipped: list[Skipped]
    unseen: int
    referenced: list[ItemView]
    sections: list[SectionView]
    skills: SkillsView | None
    protocol_version: str
    duration_ms: int | None
    total_items: int


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _cards(summary: Mapping[str, Any], keys: Sequence[tuple[str, str]]) -> list[Card]:
    return [Card(key, label, _int(summary.get(key))) for key, label in keys]


def _skipped(entries: Any) -> list[Skipped]:
    return [
        Skipped(str(s.get("name") or ""), str(s.get("reason") or ""))
        for s in entries or []
        if isinstance(s, Mapping)
    ]


def _section(kind: str, data: Any) -> SectionView | None:
    if not isinstance(data, Mapping):
        return None
    read = bool(data.get("read"))
    return SectionView(
        kind=kind,
        read=read,
        note=str(data.get("note") or ""),
        complete=data.get("complete") is not False,
        incomplete_reason=str(data.get("incomplete_reason") or ""),
        cards=_cards(data.get("summary") or {}, SUMMARY_CARDS) if read else [],
        groups=group_items(data.get("items") or []) if read else [],
        skipped=_skipped(data.get("skipped")),
    )


def _skills(data: Any) -> SkillsView | None:
    if not isinstance(data, Mapping):
        return None
    failed = data.get("failed") or {}
    return SkillsView(
        summary=str(data.get("summary") or ""),
        refreshed=[str(n) for n in data.get("refreshed") or []],
        failed=sorted((str(k), str(v)) for k, v in failed.items())
        if isinstance(failed, Mapping)
        else [],
        skipped=[str(n) for n in data.get("skipped") or []],
        error=str(data.get("error") or ""),
    )


def report_view(report: Mapping[str, Any] | None) -> ReportView:
    """The stored report of a run (SPEC 6), shaped for `refresh/_report.html`."""
    report = report or {}
    summary = report.get("summary") or {}
    items = [i for i in report.get("items") or [] if isinstance(i, Mapping)]
    groups = group_items(items)
    referenced = [
        item_view(i)
        for i in items
        if i.get("change") == "disappeared" and i.get("referenced_by")
    ]
    error = report.get("error")
    return ReportView(
        has_report=bool(report.get("summary") or report.get("items")),
        applied=bool(report.get("applied")),
        complete=report.get("complete") is not False,
        incomplete_reason=str(report.get("incomplete_reason") or ""),
        stale_preview=bool(report.get("stale_preview")),
        note=str(report.get("note") or ""),
        error=str(error.get("message") or "") if isinstance(error, Mapping) else "",
        cards=_cards(summary, SUMMARY_CARDS),
        done_cards=[c for c in _cards(summary, DONE_CARDS) if c.count]
        if report.get("applied")
        else [],
        groups=groups,
        skipped=_skipped(report.get("skipped")),
        unseen=_int(summary.get("unseen")),
        referenced=sorted(referenced, key=lambda i: i.name),
        sections=[
            s
            for s in (
                _section("prompts", report.get("prompts")),
                _section("resources", report.get("resources")),
            )
            if s is not None
        ],
        skills=_skills(report.get("skills")),
        protocol_version=str(report.get("protocol_version") or ""),
        duration_ms=report.get("duration_ms")
        if isinstance(report.get("duration_ms"), int)
        else None,
        total_items=len(items),
    )


# -- revisions -----------------------------------------------------------------


def revision_diff(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> list[FieldDiff]:
    """Every server-owned field of two tool specs (wire form), side by side.

    Unchanged fields are included (marked `changed=False`) so the page can
    show the whole definition, not only what moved.
    """
    a, b = snake_keys(before), snake_keys(after)
    names = [n for n in SPEC_FIELD_ORDER if n in a or n in b]
    names += sorted((set(a) | set(b)) - set(names))
    return [field_diff(n, a.get(n), b.get(n), rows=True) for n in names]


# -- run lists -----------------------------------------------------------------

OUTCOME_TONES: dict[str, str] = {
    "applied": "ok",
    "dry_run": "info",
    "incomplete": "warn",
    "stale_preview": "warn",
    "failed": "bad",
    "skipped": "muted",
    "queued": "muted",
    "running": "info",
}
OUTCOME_LABELS: dict[str, str] = {
    "applied": "applied",
    "dry_run": "dry run",
    "incomplete": "incomplete",
    "stale_preview": "not applied: server changed",
    "failed": "failed",
    "skipped": "skipped",
    "queued": "queued",
    "running": "running",
}


def run_outcome(
    *, status: Any, applied: Any, complete: Any, apply_requested: bool = False
) -> tuple[str, str]:
    """A run's outcome as (label, tone) for badges.

    A succeeded run that was asked to apply and did not can only have met a
    changed catalog (a stale preview): apply is refused for nothing else.
    """
    if status == "succeeded":
        if applied:
            key = "incomplete" if complete is False else "applied"
        elif apply_requested:
            key = "stale_preview"
        else:
            key = "incomplete" if complete is False else "dry_run"
    else:
        key = str(status)
    return OUTCOME_LABELS.get(key, key), OUTCOME_TONES.get(key, "muted")


def counts_text(summary: Mapping[str, Any] | None) -> str:
    """`+2 ~3 −1 ↺1 ⚠1` (added, updated, disappeared, returning, skipped) or `no changes`."""
    parts = []
    for key, sign in (
        ("added", "+"),
        ("updated", "~"),
        ("disappeared", "−"),
        ("returning", "↺"),
        ("skipped", "⚠"),
    ):
        n = _int((summary or {}).get(key))
        if n:
            parts.append(f"{sign}{n}")
    return " ".join(parts) if parts else "no changes"
