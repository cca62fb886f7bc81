"""The diff (SPEC 3.3) as a pure function: no database."""

from __future__ import annotations

from refresh.diff import (
    Action,
    Change,
    DiffOptions,
    RowSnapshot,
    catalog_fingerprint,
    diff_catalog,
)
from refresh.normalize import NormalizeLimits, SkippedEntry, normalize_tools, spec_hash


def offered(*entries):
    return normalize_tools(list(entries), NormalizeLimits()).entries


def tool(name, description="d", **extra):
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object"},
        **extra,
    }


def row(
    entry,
    *,
    active=True,
    effect="write",
    review_state="pending",
    revision=1,
    row_id=None,
):
    (spec,) = offered(entry)
    return RowSnapshot(
        key=spec.key,
        spec=dict(spec.spec),
        spec_hash=spec.spec_hash,
        active=active,
        effect=effect,
        review_state=review_state,
        revision=revision,
        row_id=row_id or abs(hash(spec.key)) % 10_000,
    )


def kinds(diff):
    return {i.name: (i.change, i.action) for i in diff.items}


def test_every_change_kind():
    current = [
        row(tool("same")),
        row(tool("changed", "old")),
        row(tool("back"), active=False),
        row(tool("gone")),
        row(tool("long_gone"), active=False),
    ]
    diff = diff_catalog(
        current,
        offered(tool("same"), tool("changed", "new"), tool("back"), tool("new")),
        [],
        complete=True,
    )
    assert kinds(diff) == {
        "same": (Change.UNCHANGED, Action.NONE),
        "changed": (Change.UPDATED, Action.UPDATE),
        "back": (Change.RETURNING, Action.LEAVE_INACTIVE),
        "gone": (Change.DISAPPEARED, Action.LEAVE_ACTIVE),
        "new": (Change.ADDED, Action.CREATE),
    }
    counts = diff.counts()
    assert counts["added"] == counts["updated"] == counts["unchanged"] == 1
    assert counts["returning"] == counts["disappeared"] == 1


def test_updated_lists_changed_fields_with_before_and_after():
    diff = diff_catalog(
        [row(tool("x", "old", title="T"))],
        offered(tool("x", "new", title="T")),
        [],
        complete=True,
    )
    (item,) = diff.items
    assert item.changed_fields == ("description",)
    assert item.before == {"description": "old"}
    assert item.after == {"description": "new"}


def test_schema_change_uses_snake_case_field_names():
    old = tool("x")
    new = tool(
        "x", inputSchema={"type": "object", "properties": {"a": {"type": "string"}}}
    )
    (item,) = diff_catalog([row(old)], offered(new), [], complete=True).items
    assert item.changed_fields == ("input_schema",)


def test_true_and_one_are_different_json():
    old = tool("x", _meta={"v": 1})
    new = tool("x", _meta={"v": True})
    (item,) = diff_catalog([row(old)], offered(new), [], complete=True).items
    assert item.change is Change.UPDATED and item.changed_fields == ("meta",)


def test_incomplete_catalog_produces_no_disappeared_items():
    current = [row(tool("a")), row(tool("b"))]
    diff = diff_catalog(
        current,
        offered(tool("a")),
        [],
        complete=False,
        incomplete_reason="page 2 failed",
        options=DiffOptions(deactivate_missing=True),
    )
    assert [i.change for i in diff.items] == [Change.UNCHANGED]
    assert diff.unseen == ("b",)
    assert diff.incomplete_reason == "page 2 failed"
    assert not diff.has_writes


def test_skipped_entry_of_an_existing_tool_is_not_evidence_it_disappeared():
    diff = diff_catalog(
        [row(tool("a")), row(tool("b"))],
        offered(tool("a")),
        [SkippedEntry(name="b", reason="inputSchema is missing")],
        complete=True,
        options=DiffOptions(deactivate_missing=True),
    )
    assert kinds(diff) == {"a": (Change.UNCHANGED, Action.NONE)}
    assert len(diff.skipped) == 1


def test_deactivate_only_with_the_flag():
    current = [row(tool("gone"))]
    off = diff_catalog(current, [], [], complete=True)
    on = diff_catalog(
        current, [], [], complete=True, options=DiffOptions(deactivate_missing=True)
    )
    assert off.items[0].action is Action.LEAVE_ACTIVE
    assert on.items[0].action is Action.DEACTIVATE


def test_disappeared_carries_references():
    diff = diff_catalog(
        [row(tool("gone"))],
        [],
        [],
        complete=True,
        references={"gone": ["acme/triage@2"]},
    )
    assert diff.items[0].referenced_by == ("acme/triage@2",)


def test_returning_is_reactivated_only_with_the_flag_and_may_be_changed():
    current = [row(tool("back", "old"), active=False, review_state="approved")]
    new = offered(tool("back", "new"))
    left = diff_catalog(current, new, [], complete=True).items[0]
    assert (left.change, left.action, left.writes_spec) == (
        Change.RETURNING,
        Action.LEAVE_INACTIVE,
        False,
    )
    assert left.changed_fields == ("description",)
    back = diff_catalog(
        current, new, [], complete=True, options=DiffOptions(reactivate_returning=True)
    ).items[0]
    assert (back.action, back.writes_spec, back.requires_review) == (
        Action.REACTIVATE,
        True,
        True,
    )


def test_added_is_write_whatever_the_hint():
    (item,) = diff_catalog(
        [],
        offered(tool("ro", annotations={"readOnlyHint": True})),
        [],
        complete=True,
        options=DiffOptions(apply_effect=True),
    ).items
    assert item.effect_hint == "read"
    assert item.effect_after == "write"


def test_hint_moves_effect_only_with_apply_effect():
    current = [row(tool("ro", annotations={"readOnlyHint": True}), effect="write")]
    entries = offered(tool("ro", annotations={"readOnlyHint": True}))
    plain = diff_catalog(current, entries, [], complete=True).items[0]
    assert (plain.effect_hint, plain.effect, plain.effect_after) == (
        "read",
        "write",
        "write",
    )
    assert not plain.writes
    flagged = diff_catalog(
        current, entries, [], complete=True, options=DiffOptions(apply_effect=True)
    ).items[0]
    assert flagged.effect_after == "read" and flagged.writes


def test_new_revision_of_approved_tool_requires_review():
    for state, expected in (("approved", True), ("changed", True), ("pending", False)):
        item = diff_catalog(
            [row(tool("x", "old"), review_state=state)],
            offered(tool("x", "new")),
            [],
            complete=True,
        ).items[0]
        assert item.requires_review is expected, state


def test_unchanged_catalog_has_no_writes():
    entries = [tool(f"t{i}") for i in range(50)]
    diff = diff_catalog([row(e) for e in entries], offered(*entries), [], complete=True)
    assert not diff.has_writes
    assert diff.counts()["unchanged"] == 50


def test_fingerprint_changes_with_catalog_content():
    a = offered(tool("a"), tool("b"))
    b = offered(tool("b"), tool("a"))
    c = offered(tool("a"), tool("b", "changed"))
    assert catalog_fingerprint(a, [], True) == catalog_fingerprint(b, [], True)
    assert catalog_fingerprint(a, [], True) != catalog_fingerprint(c, [], True)
    assert catalog_fingerprint(a, [], True) != catalog_fingerprint(a, [], False)
    assert spec_hash({"a": 1}) != spec_hash({"a": 2})
