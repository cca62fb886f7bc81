"""Flattening over includes and judging against a catalog: pure functions."""

from __future__ import annotations

from skills.resolve import (
    FAILED,
    MESSAGE_NAMES,
    OK,
    SKIPPED,
    Flattened,
    GatewayState,
    SkillNode,
    catalog_view,
    flatten,
    judge,
    reference_candidates,
)


def nodes(*items: SkillNode) -> dict[str, SkillNode]:
    return {n.name: n for n in items}


def test_flatten_unions_includes_at_any_depth():
    graph = nodes(
        SkillNode("a/top", ("g__1",), ("a/mid",)),
        SkillNode("a/mid", ("g__2",), ("a/low", "a/side")),
        SkillNode("a/low", ("g__3",)),
        SkillNode("a/side", ("g__3", "g__4")),
    )
    flat = flatten(graph, ["a/top"])
    assert flat["a/top"] == Flattened(frozenset({"g__1", "g__2", "g__3", "g__4"}))
    assert flat["a/low"].tools == {"g__3"}


def test_flatten_reports_missing_include_to_every_includer():
    graph = nodes(
        SkillNode("a/top", (), ("a/mid",)),
        SkillNode("a/mid", ("g__2",), ("a/ghost",)),
    )
    flat = flatten(graph, ["a/top"])
    assert flat["a/mid"].errors == ("missing include: a/ghost (included by a/mid)",)
    assert flat["a/top"].errors == flat["a/mid"].errors
    assert flat["a/top"].tools == {"g__2"}


def test_flatten_names_a_cycle_the_same_from_anywhere():
    graph = nodes(
        SkillNode("a/x", ("g__x",), ("a/y",)),
        SkillNode("a/y", ("g__y",), ("a/z",)),
        SkillNode("a/z", ("g__z",), ("a/x",)),
        SkillNode("a/outer", ("g__o",), ("a/z",)),
    )
    expected = "include cycle: a/x -> a/y -> a/z -> a/x"
    for start in (["a/outer"], ["a/y", "a/outer"], ["a/x", "a/y", "a/z", "a/outer"]):
        flat = flatten(graph, start)
        for name in ("a/x", "a/y", "a/z", "a/outer"):
            assert flat[name].errors == (expected,), (start, name)
            # Every member of a cycle reaches every other member's tools.
        assert flat["a/x"].tools == {"g__x", "g__y", "g__z"}
        assert flat["a/outer"].tools == {"g__o", "g__x", "g__y", "g__z"}


def test_flatten_self_cycle_and_cycle_below_a_missing_include():
    graph = nodes(
        SkillNode("a/self", (), ("a/self",)),
        SkillNode("a/b", (), ("a/c", "a/gone")),
        SkillNode("a/c", (), ("a/b",)),
    )
    flat = flatten(graph, ["a/self", "a/c"])
    assert flat["a/self"].errors == ("include cycle: a/self -> a/self",)
    expected = (
        "include cycle: a/b -> a/c -> a/b",
        "missing include: a/gone (included by a/b)",
    )
    assert flat["a/b"].errors == expected
    assert flat["a/c"].errors == expected


def test_flatten_survives_a_long_chain():
    depth = 5000
    graph = nodes(
        *[
            SkillNode(f"c/{i}", (f"g__{i}",), (f"c/{i + 1}",) if i < depth else ())
            for i in range(depth + 1)
        ]
    )
    flat = flatten(graph, ["c/0"])
    assert len(flat["c/0"].tools) == depth + 1


GW = GatewayState(id=1, prefix="gw", complete=True)
PARTIAL = GatewayState(id=2, prefix="part", complete=False)
NEVER = GatewayState(id=3, prefix="new", complete=None)
GATEWAYS = {g.prefix: g for g in (GW, PARTIAL, NEVER)}


def verdict(tools, active, errors=()):
    flat = Flattened(frozenset(tools), tuple(errors))
    candidates = {t: reference_candidates(t, GATEWAYS, "__") for t in tools}
    view = catalog_view(tools, candidates=candidates, active=active)
    return judge(flat, view)


def test_judge_all_found_is_ok():
    outcome = verdict({"gw__a", "gw__b"}, {(1, "a"), (1, "b")})
    assert (outcome.status, outcome.error, outcome.resolved) == (
        OK,
        "",
        ("gw__a", "gw__b"),
    )


def test_judge_lists_the_missing_names():
    outcome = verdict({"gw__a", "gw__b", "nogw__c"}, {(1, "a")})
    assert outcome.status == FAILED
    assert outcome.missing == ("gw__b", "nogw__c")
    assert outcome.error == "missing tools: gw__b, nogw__c"


def test_judge_long_missing_list_is_shortened_in_the_message_only():
    tools = {f"gw__t{i:03d}" for i in range(MESSAGE_NAMES + 5)}
    outcome = verdict(tools, set())
    assert len(outcome.missing) == MESSAGE_NAMES + 5
    assert outcome.error.endswith(" and 5 more")


def test_judge_skips_when_a_gateway_is_incomplete_or_never_read():
    outcome = verdict({"gw__a", "part__b"}, {(1, "a"), (2, "b")})
    assert outcome.status == SKIPPED
    assert (
        outcome.error == "cannot conclude: the last read of gateway part was incomplete"
    )
    outcome = verdict({"new__x"}, set())
    assert outcome.status == SKIPPED
    assert "gateway new has never been read" in outcome.error


def test_judge_a_conclusive_miss_fails_even_beside_an_incomplete_gateway():
    outcome = verdict({"gw__gone", "part__b"}, {(2, "b")})
    assert outcome.status == FAILED and outcome.missing == ("gw__gone",)


def test_judge_structural_errors_fail_first():
    outcome = verdict({"gw__a"}, {(1, "a")}, errors=["include cycle: a/x -> a/x"])
    assert (outcome.status, outcome.error) == (FAILED, "include cycle: a/x -> a/x")


def test_reference_candidates_try_every_split():
    gateways = {
        "a": GatewayState(1, "a", True),
        "a__b": GatewayState(2, "a__b", True),
    }
    found = reference_candidates("a__b__c", gateways, "__")
    assert [(g.prefix, t) for g, t in found] == [("a", "b__c"), ("a__b", "c")]
    assert reference_candidates("a__", gateways, "__") == []
    assert reference_candidates("zzz__c", gateways, "__") == []
