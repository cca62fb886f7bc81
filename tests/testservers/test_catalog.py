"""Unit tests for the catalog data and the `Catalog` holder."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from mcp import types

from testservers.catalog import (
    Catalog,
    generate_prompts,
    generate_resources,
    generate_tools,
    normalize_fault,
)

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def test_generated_tools_are_deterministic_unique_and_valid() -> None:
    tools = generate_tools(300, seed=7)
    assert tools == generate_tools(300, seed=7)
    assert generate_tools(10, seed=7) == tools[:10]
    assert generate_tools(10, seed=8) != tools[:10]
    names = [t["name"] for t in tools]
    assert len(set(names)) == len(names)
    assert all(NAME.match(n) for n in names)
    for tool in tools:
        types.Tool.model_validate(tool)  # valid per the SDK's 2025-11-25 model
        assert tool["inputSchema"]["type"] == "object"
        assert 1 <= len(tool["inputSchema"]["properties"]) <= 6
    share = sum("outputSchema" in t for t in tools) / len(tools)
    assert 0.15 < share < 0.45
    assert any("icons" in t for t in tools)
    assert any("_meta" in t for t in tools)
    assert len({len(t["description"]) for t in tools}) > 20


def test_generated_prompts_and_resources_are_valid() -> None:
    for prompt in generate_prompts(50, seed=1):
        types.Prompt.model_validate(prompt)
    resources = generate_resources(50, seed=1)
    for resource in resources:
        types.Resource.model_validate(resource)
    assert len({r["uri"] for r in resources}) == 50


def test_mutate_changes_adds_and_removes() -> None:
    catalog = Catalog(generate_tools(100))
    before = {t["name"]: t for t in catalog.tools}
    result = catalog.mutate(change=0.1, add=0.05, remove=0.05, seed=3)
    assert (len(result["changed"]), len(result["added"]), len(result["removed"])) == (
        10,
        5,
        5,
    )
    after = {t["name"]: t for t in catalog.tools}
    assert catalog.generation == 1
    assert set(result["removed"]).isdisjoint(after)
    assert set(result["added"]) <= set(after) and not set(result["added"]) & set(before)
    assert all(after[n] != before[n] for n in result["changed"])
    assert len(after) == 100
    # Same seed, same outcome.
    again = Catalog(generate_tools(100))
    assert again.mutate(seed=3) == result


def test_mutate_tolerates_invalid_entries() -> None:
    catalog = Catalog(
        [{"name": "x"}, {"nope": 1}, "not a dict", {"name": "y", "inputSchema": 5}]
    )
    catalog.mutate(change=1.0, add=0.0, remove=0.0, seed=1)
    assert catalog.tools[1:3] == [{"nope": 1}, "not a dict"]
    catalog.mutate(kind="prompts", seed=1)
    catalog.mutate(kind="resources", seed=1)


def test_raw_entries_are_stored_unvalidated_and_round_trip(tmp_path: Path) -> None:
    weird = [
        {"name": "dup"},
        {"name": "dup", "inputSchema": {"type": "string"}},
        {"name": "nul\u0000name", "description": "x" * 10, "inputSchema": {}},
        {"name": 5},
    ]
    catalog = Catalog(weird, generate_prompts(2), generate_resources(2))
    catalog.set_fault({"kind": "slow", "page": 1, "seconds": 0.5})
    path = tmp_path / "state.json"
    catalog.save(path)
    loaded = Catalog.from_file(path)
    assert loaded.tools == weird
    assert loaded.snapshot() == catalog.snapshot()
    assert loaded.names() == ["dup", "dup", "nul\u0000name"]
    assert loaded.remove_tools(["dup"]) == ["dup", "dup"]
    json.dumps(loaded.snapshot())
    assert not list(tmp_path.glob("*.tmp"))


def test_autosave_writes_every_change(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    catalog = Catalog(generate_tools(3))
    catalog.autosave(path)
    catalog.add_tools(generate_tools(1, start=3))
    assert len(Catalog.from_file(path).tools) == 4
    catalog.set_fault({"kind": "jsonrpc_error", "times": 1})
    assert catalog.take_fault(["jsonrpc_error"], "tools/list", 0) is not None
    assert Catalog.from_file(path).faults == {}


def test_fault_matching_and_budget() -> None:
    catalog = Catalog()
    catalog.set_fault({"kind": "jsonrpc_error", "page": 2, "times": 2})
    assert catalog.take_fault(["jsonrpc_error"], "tools/list", 1) is None
    assert catalog.take_fault(["jsonrpc_error"], "prompts/list", 2) is None
    assert catalog.take_fault(["jsonrpc_error"], "tools/list", 2) is not None
    assert catalog.take_fault(["jsonrpc_error"], "tools/list", 2) is not None
    assert catalog.take_fault(["jsonrpc_error"], "tools/list", 2) is None
    catalog.set_fault({"kind": "slow"})
    assert catalog.faults["slow"]["seconds"] == 1.0
    assert catalog.take_fault(["slow"], "tools/list", 99) is not None
    assert catalog.generation == 0  # faults never stale cursors
    catalog.clear_faults()
    assert catalog.faults == {}
    assert normalize_fault({"kind": "stale_cursor_once"})["times"] == 1
    with pytest.raises(ValueError, match="unknown fault kind"):
        normalize_fault({"kind": "nope"})
    with pytest.raises(ValueError, match="page"):
        normalize_fault({"kind": "slow", "page": -1})


def test_catalog_is_thread_safe() -> None:
    catalog = Catalog(generate_tools(50))

    def churn(seed: int) -> None:
        for i in range(20):
            catalog.mutate(seed=seed * 100 + i)
            catalog.page("tools", 0, 10)

    threads = [threading.Thread(target=churn, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert catalog.generation == 80
    names = catalog.names()
    assert len(names) == len(set(names))
