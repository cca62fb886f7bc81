"""Normalize and validate (SPEC 3.2): every skip reason, hashing, effect hints."""

from __future__ import annotations

import pytest

from refresh.normalize import (
    NormalizeLimits,
    canonical_json,
    effect_hint,
    normalize_prompts,
    normalize_resources,
    normalize_tools,
    spec_hash,
)

LIMITS = NormalizeLimits()


def tool(name="t", **fields):
    entry = {"name": name, "inputSchema": {"type": "object"}}
    entry.update(fields)
    return entry


def reason_for(entry, limits=LIMITS):
    result = normalize_tools([entry], limits)
    assert not result.entries, f"expected {entry!r} to be skipped"
    assert len(result.skipped) == 1
    return result.skipped[0].reason


def test_valid_tool_keeps_known_fields_and_drops_unknown():
    entry = tool(
        "search",
        title="Search",
        description="Find things",
        outputSchema={"type": "object", "properties": {"n": {"type": "integer"}}},
        annotations={"readOnlyHint": True, "title": "S"},
        icons=[
            {"src": "https://e.x/i.png", "mimeType": "image/png", "sizes": ["48x48"]}
        ],
        execution={"taskSupport": "optional"},
        _meta={"vendor": 1},
        vendorField="dropped",
    )
    result = normalize_tools([entry], LIMITS)
    assert not result.skipped
    (spec,) = result.entries
    assert spec.key == "search"
    assert "vendorField" not in spec.spec
    assert spec.spec["_meta"] == {"vendor": 1}
    assert spec.effect_hint == "read"
    assert spec.spec_hash == spec_hash(spec.spec)


def test_hash_is_independent_of_key_order_and_whitespace():
    a = tool(
        "x", inputSchema={"type": "object", "properties": {"a": {"type": "string"}}}
    )
    b = {
        "inputSchema": {"properties": {"a": {"type": "string"}}, "type": "object"},
        "name": "x",
    }
    (sa,) = normalize_tools([a], LIMITS).entries
    (sb,) = normalize_tools([b], LIMITS).entries
    assert sa.spec_hash == sb.spec_hash
    assert canonical_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'


def test_null_fields_are_absent():
    (with_null,) = normalize_tools([tool("x", title=None)], LIMITS).entries
    (without,) = normalize_tools([tool("x")], LIMITS).entries
    assert with_null.spec_hash == without.spec_hash


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"inputSchema": {"type": "object"}}, "name is missing"),
        (tool(""), "name is empty"),
        (tool("a" * 129), "129 characters long (limit 128)"),
        (tool("has space"), "outside [A-Za-z0-9_.-]"),
        (tool("slash/name"), "outside [A-Za-z0-9_.-]"),
        (tool(42), "name must be a string, got number"),
        ({"name": "x"}, "inputSchema is missing"),
        (
            tool("x", inputSchema="object"),
            "inputSchema must be an object schema, got string",
        ),
        (tool("x", inputSchema={"type": "string"}), "not an object schema"),
        (tool("x", inputSchema={"properties": {}}), "not an object schema"),
        (
            tool(
                "x",
                inputSchema={"type": "object", "properties": {"a": {"type": "strin"}}},
            ),
            "inputSchema is not valid JSON Schema",
        ),
        (
            tool("x", inputSchema={"type": "object", "minProperties": -1}),
            "inputSchema is not valid JSON Schema",
        ),
        (
            tool(
                "x",
                inputSchema={"$schema": "https://example.com/mine", "type": "object"},
            ),
            "unknown $schema",
        ),
        (
            tool("x", outputSchema={"type": "array"}),
            "outputSchema is not an object schema",
        ),
        (
            tool("x", outputSchema={"type": "object", "required": "a"}),
            "outputSchema is not valid JSON Schema",
        ),
        (tool("x", title=5), "title must be a string, got number"),
        (tool("x", description=["a"]), "description must be a string, got array"),
        (tool("x", annotations="ro"), "annotations must be an object"),
        (
            tool("x", annotations={"readOnlyHint": "yes"}),
            "annotations.readOnlyHint must be a boolean",
        ),
        (tool("x", icons={"src": "a"}), "icons must be an array"),
        (tool("x", icons=[{"mimeType": "image/png"}]), "icons[0].src must be a string"),
        (tool("x", _meta=[1]), "_meta must be an object"),
        (
            tool("x", execution={"taskSupport": 1}),
            "execution.taskSupport must be a string",
        ),
        (tool("x", description="bad\x00byte"), "NUL character at $.description"),
        (tool("x\x00y"), "NUL character"),
        (
            tool("x", inputSchema={"type": "object", "properties": {"a\x00": {}}}),
            "NUL character",
        ),
        (tool("x", description="d" * 65_537), "65,537 characters long (limit 65,536)"),
        ("just a string", "entry is a string, not an object"),
        (None, "entry is a null, not an object"),
    ],
)
def test_every_skip_reason(entry, expected):
    assert expected in reason_for(entry)


def test_schema_size_limit_counts_canonical_bytes():
    props = {f"p{i}": {"type": "string", "description": "x" * 200} for i in range(1400)}
    big = tool("big", inputSchema={"type": "object", "properties": props})
    assert "bytes (limit 262,144)" in reason_for(big)
    small_limits = NormalizeLimits(max_schema_bytes=10)
    assert "bytes (limit 10)" in reason_for(tool("x"), small_limits)


def test_one_megabyte_description_is_skipped_not_truncated():
    reason = reason_for(tool("x", description="y" * 1_048_576))
    assert "1,048,576 characters long" in reason


def test_duplicate_names_skip_every_copy_but_keep_the_rest():
    result = normalize_tools(
        [tool("dup"), tool("ok"), tool("dup", description="2")], LIMITS
    )
    assert [e.key for e in result.entries] == ["ok"]
    assert [s.name for s in result.skipped] == ["dup", "dup"]
    assert all("occurs 2 times" in s.reason for s in result.skipped)


def test_one_bad_entry_does_not_lose_the_others():
    entries = [tool(f"t{i}") for i in range(5)] + [{"name": "bad"}]
    result = normalize_tools(entries, LIMITS)
    assert len(result.entries) == 5 and len(result.skipped) == 1


def test_older_dialects_are_checked_against_their_meta_schema():
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
    assert normalize_tools([tool("x", inputSchema=draft7)], LIMITS).entries
    bad7 = {**draft7, "properties": {"a": {"type": 3}}}
    assert "not valid JSON Schema" in reason_for(tool("x", inputSchema=bad7))


def test_nan_is_not_json():
    assert "not valid JSON" in reason_for(
        tool("x", inputSchema={"type": "object", "default": float("nan")})
    )


@pytest.mark.parametrize(
    ("annotations", "hint"),
    [
        ({"readOnlyHint": True}, "read"),
        ({"readOnlyHint": False}, "write"),
        ({}, "write"),
        (None, "write"),
        ({"destructiveHint": False}, "write"),
    ],
)
def test_effect_hint(annotations, hint):
    assert effect_hint(annotations) == hint


def test_prompts_and_resources():
    prompts = normalize_prompts(
        [
            {"name": "p", "arguments": [{"name": "a", "required": True}]},
            {"name": "bad", "arguments": [1]},
        ],
        LIMITS,
    )
    assert [e.key for e in prompts.entries] == ["p"]
    assert "arguments[0]" in prompts.skipped[0].reason
    resources = normalize_resources(
        [
            {"uri": "file:///a", "name": "a", "size": 3},
            {"uri": "", "name": "x"},
            {"uri": "u", "name": "n", "size": "3"},
        ],
        LIMITS,
    )
    assert [e.key for e in resources.entries] == ["file:///a"]
    assert len(resources.skipped) == 2
