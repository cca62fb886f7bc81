"""A thread-safe, persistable holder of raw MCP catalog entries and faults.

Pure data: nothing here imports the MCP SDK. Entries are kept in wire form
(camelCase keys) and are never validated, so tests can store deliberately
broken tools and have them reach the wire unchanged.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from testservers.generators import (
    MIME_TYPES,
    generate_prompts,
    generate_resources,
    generate_tools,
)

__all__ = [
    "FAULT_KINDS",
    "HTTP_FAULT_KINDS",
    "KINDS",
    "Catalog",
    "generate_prompts",
    "generate_resources",
    "generate_tools",
    "normalize_fault",
]

KINDS: tuple[str, ...] = ("tools", "prompts", "resources")
"""The catalog's entry kinds, in the order they are listed by MCP."""

HTTP_FAULT_KINDS: frozenset[str] = frozenset({"http_500", "garbage", "html"})
"""Faults applied by the HTTP front (status codes, bodies), not by the MCP layer."""

FAULT_KINDS: frozenset[str] = frozenset(
    {
        "jsonrpc_error",
        "timeout",
        "slow",
        "cursor_loop",
        "endless",
        "stale_cursor_once",
        *HTTP_FAULT_KINDS,
    }
)
"""Every fault kind a `Catalog` accepts."""

_NAME_INDEX = re.compile(r"(\d+)$")
_DEFAULT_SECONDS = {"slow": 1.0, "timeout": 60.0}
_LIST_METHODS = frozenset({"tools/list", "prompts/list", "resources/list"})

_GENERATORS = {
    "tools": generate_tools,
    "prompts": generate_prompts,
    "resources": generate_resources,
}


def normalize_fault(spec: dict[str, Any]) -> dict[str, Any]:
    """Validate a fault spec and fill its defaults.

    Raises `ValueError` if malformed (`TypeError` if not a dict).
    """
    if not isinstance(spec, dict):
        raise TypeError("fault spec must be an object")
    kind = spec.get("kind")
    if kind not in FAULT_KINDS:
        raise ValueError(
            f"unknown fault kind {kind!r}; expected one of {sorted(FAULT_KINDS)}"
        )
    page = spec.get("page")
    if page is not None and (
        not isinstance(page, int) or isinstance(page, bool) or page < 0
    ):
        raise ValueError("page must be a non-negative integer or null")
    times = spec.get("times", 1 if kind == "stale_cursor_once" else None)
    if times is not None and (
        not isinstance(times, int) or isinstance(times, bool) or times < 1
    ):
        raise ValueError("times must be a positive integer or null")
    seconds = spec.get("seconds")
    if seconds is None:
        seconds = _DEFAULT_SECONDS.get(kind)
    elif (
        not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0
    ):
        raise ValueError("seconds must be a non-negative number or null")
    method = spec.get("method", "tools/list")
    if method not in _LIST_METHODS:
        raise ValueError(f"method must be one of {sorted(_LIST_METHODS)}")
    return {
        "kind": kind,
        "page": page,
        "seconds": seconds,
        "times": times,
        "method": method,
    }


def _entry_key(kind: str, entry: Any) -> str | None:
    """The identifying string of an entry (name, or uri for resources), if any."""
    if not isinstance(entry, dict):
        return None
    value = entry.get("uri" if kind == "resources" else "name")
    return value if isinstance(value, str) else None


class Catalog:
    """Thread-safe holder of raw tool, prompt and resource dicts plus faults.

    Entries are stored as given, never validated. Lists are replaced, never
    edited in place, so a page handed out by `page()` stays consistent while
    the catalog changes. `generation` is bumped on every content change (not
    on fault changes, so arming a fault does not stale a client's cursors).
    """

    def __init__(
        self,
        tools: Iterable[dict[str, Any]] = (),
        prompts: Iterable[dict[str, Any]] = (),
        resources: Iterable[dict[str, Any]] = (),
        *,
        generation: int = 0,
        faults: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._entries: dict[str, list[Any]] = {
            "tools": list(tools),
            "prompts": list(prompts),
            "resources": list(resources),
        }
        self._generation = generation
        self._faults: dict[str, dict[str, Any]] = {
            k: normalize_fault(v) for k, v in (faults or {}).items()
        }
        self._autosave: Path | None = None

    # -- reading --------------------------------------------------------------

    @property
    def generation(self) -> int:
        """Counter bumped on every change to tools, prompts or resources."""
        return self._generation

    @property
    def tools(self) -> list[Any]:
        """A shallow copy of the raw tool entries."""
        return list(self._entries["tools"])

    @property
    def prompts(self) -> list[Any]:
        """A shallow copy of the raw prompt entries."""
        return list(self._entries["prompts"])

    @property
    def resources(self) -> list[Any]:
        """A shallow copy of the raw resource entries."""
        return list(self._entries["resources"])

    @property
    def faults(self) -> dict[str, dict[str, Any]]:
        """A copy of the armed faults, keyed by kind."""
        with self._lock:
            return copy.deepcopy(self._faults)

    def entries(self, kind: str) -> list[Any]:
        """A shallow copy of the raw entries of `kind` (tools/prompts/resources)."""
        return list(self._entries[kind])

    def page(self, kind: str, offset: int, limit: int) -> tuple[list[Any], int, int]:
        """Return `(entries[offset:offset+limit], total, generation)` atomically."""
        with self._lock:
            items = self._entries[kind]
            return items[offset : offset + limit], len(items), self._generation

    def names(self, kind: str = "tools") -> list[str]:
        """Names of the entries of `kind` (URIs for resources), skipping nameless ones."""
        return [
            k for e in self._entries[kind] if (k := _entry_key(kind, e)) is not None
        ]

    def find_tool(self, name: str) -> dict[str, Any] | None:
        """The first tool dict called `name`, or None."""
        for tool in self._entries["tools"]:
            if isinstance(tool, dict) and tool.get("name") == name:
                return tool
        return None

    def counts(self) -> dict[str, int]:
        """Number of entries of each kind."""
        return {kind: len(self._entries[kind]) for kind in KINDS}

    # -- changing entries -----------------------------------------------------

    def _replace(self, kind: str, entries: list[Any]) -> None:
        with self._lock:
            self._entries[kind] = entries
            self._generation += 1
            self._changed()

    def set_entries(self, kind: str, entries: Iterable[Any]) -> None:
        """Replace every entry of `kind`."""
        self._replace(kind, list(entries))

    def add_entries(self, kind: str, entries: Iterable[Any]) -> None:
        """Append entries of `kind` (duplicates are kept on purpose)."""
        with self._lock:
            self._replace(kind, [*self._entries[kind], *entries])

    def remove_entries(self, kind: str, keys: Iterable[str]) -> list[str]:
        """Remove every entry of `kind` whose name (or uri) is in `keys`."""
        wanted = set(keys)
        with self._lock:
            current = self._entries[kind]
            kept = [e for e in current if _entry_key(kind, e) not in wanted]
            removed = [k for e in current if (k := _entry_key(kind, e)) in wanted]
            if removed:
                self._replace(kind, kept)
            return removed

    def set_tools(self, tools: Iterable[dict[str, Any]]) -> None:
        """Replace the tool list with `tools`, stored as given."""
        self.set_entries("tools", tools)

    def add_tools(self, tools: Iterable[dict[str, Any]]) -> None:
        """Append `tools`, stored as given."""
        self.add_entries("tools", tools)

    def remove_tools(self, names: Iterable[str]) -> list[str]:
        """Remove every tool whose name is in `names`; returns the removed names."""
        return self.remove_entries("tools", names)

    def set_prompts(self, prompts: Iterable[dict[str, Any]]) -> None:
        """Replace the prompt list with `prompts`, stored as given."""
        self.set_entries("prompts", prompts)

    def set_resources(self, resources: Iterable[dict[str, Any]]) -> None:
        """Replace the resource list with `resources`, stored as given."""
        self.set_entries("resources", resources)

    def mutate(
        self,
        *,
        change: float = 0.1,
        add: float = 0.05,
        remove: float = 0.05,
        seed: int | None = None,
        kind: str = "tools",
    ) -> dict[str, list[str]]:
        """Change, add and remove a share of the entries of `kind` in one step.

        Each non-zero share touches at least one entry. Changed entries get a
        new description, a schema property (tools) or argument (prompts), or a
        flipped annotation (tools) / new mimeType (resources). Invalid raw
        entries are left alone when they cannot be edited.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        rng = random.Random(seed) if seed is not None else random.Random()
        with self._lock:
            entries = list(self._entries[kind])
            keyed = [
                i for i, e in enumerate(entries) if _entry_key(kind, e) is not None
            ]
            revision = self._generation + 1
            removed_idx = set(
                rng.sample(keyed, k=min(len(keyed), _share(remove, len(keyed))))
            )
            candidates = [i for i in keyed if i not in removed_idx]
            changed: list[str] = []
            for i in rng.sample(
                candidates, k=min(len(candidates), _share(change, len(keyed)))
            ):
                entries[i] = _mutated(kind, entries[i], rng, revision)
                changed.append(_entry_key(kind, entries[i]) or "")
            removed = [_entry_key(kind, entries[i]) or "" for i in sorted(removed_idx)]
            entries = [e for i, e in enumerate(entries) if i not in removed_idx]
            fresh = _GENERATORS[kind](
                _share(add, len(keyed)),
                rng.randrange(1 << 30),
                start=self._next_index(kind),
            )
            entries.extend(fresh)
            self._replace(kind, entries)
            return {
                "changed": changed,
                "added": [_entry_key(kind, e) or "" for e in fresh],
                "removed": removed,
            }

    def _next_index(self, kind: str) -> int:
        # New entries continue the numeric suffix so names stay unique.
        highest = -1
        for key in self.names(kind):
            stem = key.rsplit(".", 1)[0] if kind == "resources" else key
            match = _NAME_INDEX.search(stem.rsplit("/", 1)[-1])
            if match:
                highest = max(highest, int(match.group(1)))
        return highest + 1

    # -- faults ---------------------------------------------------------------

    def set_fault(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Arm a fault (replacing any armed fault of the same kind)."""
        fault = normalize_fault(spec)
        with self._lock:
            self._faults[fault["kind"]] = fault
            self._changed()
        return fault

    def clear_faults(self, kind: str | None = None) -> None:
        """Disarm one fault kind, or every fault."""
        with self._lock:
            if kind is None:
                self._faults.clear()
            else:
                self._faults.pop(kind, None)
            self._changed()

    def take_fault(
        self, kinds: Iterable[str], method: str, page: int | None
    ) -> dict[str, Any] | None:
        """Consume one firing of the first armed fault in `kinds` matching the request.

        A fault matches when its method is `method` and its page is null or
        `page`. Its `times` budget is decremented; at zero it is disarmed.
        """
        with self._lock:
            for kind in kinds:
                fault = self._faults.get(kind)
                if fault is None or fault["method"] != method:
                    continue
                if fault["page"] is not None and fault["page"] != page:
                    continue
                if fault["times"] is not None:
                    fault["times"] -= 1
                    if fault["times"] <= 0:
                        del self._faults[kind]
                    self._changed()
                return dict(fault)
            return None

    def has_faults(self, kinds: Iterable[str]) -> bool:
        """Whether any fault of `kinds` is armed."""
        return any(k in self._faults for k in kinds)

    # -- persistence ----------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The full state as a JSON-able dict (entries are deep-copied)."""
        with self._lock:
            return copy.deepcopy(self._snapshot_view())

    def _snapshot_view(self) -> dict[str, Any]:
        return {
            "version": 1,
            "generation": self._generation,
            "tools": self._entries["tools"],
            "prompts": self._entries["prompts"],
            "resources": self._entries["resources"],
            "faults": self._faults,
        }

    def load(self, data: dict[str, Any]) -> None:
        """Replace the whole state with a `snapshot()` dict."""
        faults = {k: normalize_fault(v) for k, v in (data.get("faults") or {}).items()}
        with self._lock:
            for kind in KINDS:
                self._entries[kind] = list(data.get(kind) or [])
            self._generation = int(data.get("generation", self._generation + 1))
            self._faults = faults
            self._changed()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the state to `path` atomically (temp file in the same dir + rename)."""
        target = Path(path)
        with self._lock:
            text = json.dumps(self._snapshot_view(), ensure_ascii=False)
        atomic_write_text(target, text)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Catalog:
        """Build a catalog from a file written by `save()`."""
        catalog = cls()
        catalog.load(json.loads(Path(path).read_text(encoding="utf-8")))
        return catalog

    def autosave(self, path: str | os.PathLike[str] | None) -> None:
        """Save to `path` after every change (and fault firing) from now on."""
        with self._lock:
            self._autosave = Path(path) if path is not None else None
            self._changed()

    def _changed(self) -> None:
        # Saved under the lock so concurrent changes land on disk in order.
        if self._autosave is not None:
            self.save(self._autosave)


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _share(fraction: float, total: int) -> int:
    if fraction <= 0 or total <= 0:
        return 0
    return max(1, math.ceil(fraction * total - 1e-9))


def _mutated(
    kind: str, entry: dict[str, Any], rng: random.Random, revision: int
) -> dict[str, Any]:
    new = copy.deepcopy(entry)
    how = rng.choice(["description", "schema", "annotation"])
    if kind == "tools" and how == "schema" and isinstance(new.get("inputSchema"), dict):
        schema = new["inputSchema"]
        props = schema.get("properties")
        if not isinstance(props, dict):
            props = schema["properties"] = {}
        props[f"option_r{revision}"] = {
            "type": rng.choice(["string", "integer", "boolean"]),
            "description": f"Option added in revision {revision}.",
        }
        return new
    if kind == "tools" and how == "annotation":
        annotations = new.get("annotations")
        if not isinstance(annotations, dict):
            annotations = new["annotations"] = {}
        hint = rng.choice(["readOnlyHint", "idempotentHint", "openWorldHint"])
        annotations[hint] = not annotations.get(hint, hint == "openWorldHint")
        return new
    if kind == "prompts" and how == "schema":
        args = new.get("arguments")
        if not isinstance(args, list):
            args = new["arguments"] = []
        args.append(
            {"name": f"extra_r{revision}", "description": "Added.", "required": False}
        )
        return new
    if kind == "resources" and how == "annotation":
        new["mimeType"] = rng.choice(MIME_TYPES)
        if new["mimeType"] != entry.get("mimeType"):
            return new
    base = new.get("description")
    base = base if isinstance(base, str) else ""
    new["description"] = f"{base} (Revised in revision {revision}.)".strip()
    return new
