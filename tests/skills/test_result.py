"""SkillRefreshResult: counts, summary, merge, immutability (no database)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import pickle

import pytest

from skills.registry import SkillRefreshResult


def test_to_summary_is_exact():
    result = SkillRefreshResult(
        refreshed=["a/one", "a/two", "a/three"],
        failed={"a/four": "missing tools: gw__x"},
        skipped=[],
    )
    assert result.to_summary() == "refreshed: 3, failed: 1, skipped: 0"
    assert (result.total_refreshed, result.total_failed, result.total_skipped) == (
        3,
        1,
        0,
    )


def test_empty_result_summary():
    assert SkillRefreshResult().to_summary() == "refreshed: 0, failed: 0, skipped: 0"


def test_merge_concatenates_lists_and_merges_dicts():
    left = SkillRefreshResult(
        refreshed=["a/one"], failed={"a/two": "first"}, skipped=["a/three"]
    )
    right = SkillRefreshResult(
        refreshed=["b/one", "b/two"], failed={"b/three": "x"}, skipped=["b/four"]
    )
    merged = left.merge(right)
    assert merged.refreshed == ["a/one", "b/one", "b/two"]
    assert merged.failed == {"a/two": "first", "b/three": "x"}
    assert merged.skipped == ["a/three", "b/four"]
    assert merged.to_summary() == "refreshed: 3, failed: 2, skipped: 2"
    # Neither input changed.
    assert left.refreshed == ["a/one"] and right.failed == {"b/three": "x"}


def test_merge_other_wins_on_the_same_failed_name():
    merged = SkillRefreshResult(failed={"a/x": "old"}).merge(
        SkillRefreshResult(failed={"a/x": "new"})
    )
    assert merged.failed == {"a/x": "new"}


def test_merged_equals_folding_merge():
    parts = [
        SkillRefreshResult(refreshed=[f"n/r{i}"], failed={f"n/f{i % 3}": str(i)})
        for i in range(7)
    ] + [SkillRefreshResult(skipped=["n/s"])]
    folded = functools.reduce(SkillRefreshResult.merge, parts, SkillRefreshResult())
    assert SkillRefreshResult.merged(parts) == folded


def test_result_is_immutable():
    result = SkillRefreshResult(refreshed=["a/x"], failed={"a/y": "m"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.refreshed = []  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.refreshed.append("a/z")
    with pytest.raises(TypeError):
        result.skipped += ["a/z"]  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.failed["a/z"] = "m"
    with pytest.raises(TypeError):
        result.failed.update({"a/z": "m"})
    assert result.to_summary() == "refreshed: 1, failed: 1, skipped: 0"


def test_result_copies_its_inputs():
    names = ["a/x"]
    result = SkillRefreshResult(refreshed=names)
    names.append("a/y")
    assert result.refreshed == ["a/x"]


def test_result_serialises_and_copies():
    result = SkillRefreshResult(refreshed=["a/x"], failed={"a/y": "m"}, skipped=["s/k"])
    assert pickle.loads(pickle.dumps(result)) == result
    assert copy.deepcopy(result) == result
    assert json.loads(json.dumps(result.to_dict())) == {
        "summary": "refreshed: 1, failed: 1, skipped: 1",
        "refreshed": ["a/x"],
        "failed": {"a/y": "m"},
        "skipped": ["s/k"],
    }
