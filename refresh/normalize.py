"""Normalize and validate raw catalog entries (SPEC 3.2). Pure: no I/O, no Django.

Every raw entry a server listed becomes either a normalized spec (with its
SHA-256 over canonical JSON) or a skipped entry with a reason. A skipped entry
is never written and is never evidence that a tool disappeared.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema_rs

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]+")
MAX_NAME_LENGTH = 128
MAX_URI_LENGTH = 2000

# MCP Tool fields other than `name`, in wire form. Unknown keys are dropped so
# a server adding vendor fields does not churn hashes; `_meta` is the
# protocol's place for those.
TOOL_WIRE_FIELDS: tuple[str, ...] = (
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "icons",
    "execution",
    "_meta",
)
PROMPT_WIRE_FIELDS: tuple[str, ...] = (
    "title",
    "description",
    "arguments",
    "icons",
    "_meta",
)
RESOURCE_WIRE_FIELDS: tuple[str, ...] = (
    "name",
    "title",
    "description",
    "mimeType",
    "size",
    "annotations",
    "icons",
    "_meta",
)
HINT_KEYS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


@dataclass(frozen=True)
class NormalizeLimits:
    """Size limits of SPEC 3.2 (settings supply the values)."""

    max_description_chars: int = 65_536
    max_schema_bytes: int = 262_144


@dataclass(frozen=True, eq=False)
class EntrySpec:
    """One valid, normalized catalog entry (a tool, prompt or resource)."""

    key: str
    spec: Mapping[str, Any]
    spec_hash: str
    effect_hint: str | None = None


@dataclass(frozen=True)
class SkippedEntry:
    """A listed entry that was not taken, and why."""

    name: str
    reason: str


@dataclass(frozen=True, eq=False)
class Normalized:
    """The result of normalizing one listing."""

    entries: tuple[EntrySpec, ...]
    skipped: tuple[SkippedEntry, ...]


class _Invalid(Exception):
    """Raised inside validation; the message is the skip reason."""


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no insignificant whitespace."""
    return json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def spec_hash(spec: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a spec's canonical JSON."""
    return hashlib.sha256(canonical_json(spec).encode("utf-8")).hexdigest()


def effect_hint(annotations: Mapping[str, Any] | None) -> str:
    """`read` only when the server says `readOnlyHint: true`; anything else is `write`."""
    if isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True:
        return "read"
    return "write"


def normalize_tools(entries: Iterable[Any], limits: NormalizeLimits) -> Normalized:
    """Validate and normalize a `tools/list` listing."""
    return _normalize(entries, "name", TOOL_WIRE_FIELDS, _tool_spec, limits)


def normalize_prompts(entries: Iterable[Any], limits: NormalizeLimits) -> Normalized:
    """Validate and normalize a `prompts/list` listing (keyed by name)."""
    return _normalize(entries, "name", PROMPT_WIRE_FIELDS, _prompt_spec, limits)


def normalize_resources(entries: Iterable[Any], limits: NormalizeLimits) -> Normalized:
    """Validate and normalize a `resources/list` listing (keyed by URI)."""
    return _normalize(entries, "uri", RESOURCE_WIRE_FIELDS, _resource_spec, limits)


def _display_key(entry: Any, key_field: str) -> str:
    if not isinstance(entry, Mapping):
        return ""
    value = entry.get(key_field)
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000")[:200]
    return "" if value is None else repr(value)[:200]


def _normalize(
    entries: Iterable[Any],
    key_field: str,
    fields: Sequence[str],
    build: Callable[[dict[str, Any], _Canonical, NormalizeLimits], EntrySpec],
    limits: NormalizeLimits,
) -> Normalized:
    raw = list(entries)
    counts = Counter(
        e.get(key_field)
        for e in raw
        if isinstance(e, Mapping) and isinstance(e.get(key_field), str)
    )
    valid: list[EntrySpec] = []
    skipped: list[SkippedEntry] = []
    for entry in raw:
        shown = _display_key(entry, key_field)
        try:
            if not isinstance(entry, Mapping):
                raise _Invalid(f"entry is a {_json_type(entry)}, not an object")
            spec = _pick(entry, (key_field, *fields))
            # One canonical encoding per entry serves the NUL screen, the size
            # bound and the hash: json.dumps dominated a 10,000-tool refresh.
            canonical = _Canonical.of(spec)
            key = entry.get(key_field)
            if isinstance(key, str) and counts[key] > 1:
                raise _Invalid(
                    f"{key_field} occurs {counts[key]} times in one listing; "
                    "every copy is skipped because the listing is ambiguous"
                )
            valid.append(build(spec, canonical, limits))
        except _Invalid as exc:
            skipped.append(SkippedEntry(name=shown, reason=str(exc)))
    return Normalized(entries=tuple(valid), skipped=tuple(skipped))


@dataclass(frozen=True)
class _Canonical:
    """An entry's canonical JSON bytes and their SHA-256."""

    size: int
    digest: str

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> _Canonical:
        try:
            text = canonical_json(spec)
        except (ValueError, TypeError) as exc:  # NaN or Infinity: not JSON
            raise _Invalid(f"entry is not valid JSON: {exc}") from exc
        # JSON text escapes NUL as \u0000; only then walk for its path.
        if "\\u0000" in text:
            nul = _find_nul(spec, "$")
            if nul:
                raise _Invalid(f"a string holds a NUL character at {nul}")
        data = text.encode("utf-8")
        return cls(size=len(data), digest=hashlib.sha256(data).hexdigest())


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _check_name(name: Any, field: str = "name") -> str:
    if name is None:
        raise _Invalid(f"{field} is missing")
    if not isinstance(name, str):
        raise _Invalid(f"{field} must be a string, got {_json_type(name)}")
    if name == "":
        raise _Invalid(f"{field} is empty")
    if len(name) > MAX_NAME_LENGTH:
        raise _Invalid(
            f"{field} is {len(name)} characters long (limit {MAX_NAME_LENGTH})"
        )
    if not NAME_PATTERN.fullmatch(name):
        raise _Invalid(f"{field} {name[:60]!r} has characters outside [A-Za-z0-9_.-]")
    return name


def _find_nul(value: Any, path: str) -> str | None:
    """The JSON path of the first string (or key) holding a NUL, if any."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and "\x00" in k:
                return f"{path}.<key>"
            found = _find_nul(v, f"{path}.{k}")
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _find_nul(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _expect(
    entry: Mapping[str, Any], field: str, types: tuple[type, ...], label: str
) -> Any:
    value = entry.get(field)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in types:
        raise _Invalid(f"{field} must be {label}, got boolean")
    if not isinstance(value, types):
        raise _Invalid(f"{field} must be {label}, got {_json_type(value)}")
    return value


def _check_common(entry: Mapping[str, Any], limits: NormalizeLimits) -> None:
    _expect(entry, "title", (str,), "a string")
    description = _expect(entry, "description", (str,), "a string")
    if description is not None and len(description) > limits.max_description_chars:
        raise _Invalid(
            f"description is {len(description):,} characters long "
            f"(limit {limits.max_description_chars:,})"
        )
    _expect(entry, "_meta", (dict,), "an object")
    icons = _expect(entry, "icons", (list,), "an array")
    for i, icon in enumerate(icons or ()):
        if not isinstance(icon, Mapping):
            raise _Invalid(f"icons[{i}] must be an object, got {_json_type(icon)}")
        if not isinstance(icon.get("src"), str):
            raise _Invalid(f"icons[{i}].src must be a string")
        for key in ("mimeType", "theme"):
            if key in icon and icon[key] is not None and not isinstance(icon[key], str):
                raise _Invalid(f"icons[{i}].{key} must be a string")
        sizes = icon.get("sizes")
        if sizes is not None and (
            not isinstance(sizes, list) or not all(isinstance(s, str) for s in sizes)
        ):
            raise _Invalid(f"icons[{i}].sizes must be an array of strings")


def _pick(entry: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    return {f: entry[f] for f in fields if entry.get(f) is not None}


def _tool_spec(
    entry: dict[str, Any], canonical: _Canonical, limits: NormalizeLimits
) -> EntrySpec:
    name = _check_name(entry.get("name"))
    _check_common(entry, limits)
    annotations = _expect(entry, "annotations", (dict,), "an object")
    if annotations is not None:
        if "title" in annotations and not isinstance(annotations["title"], str | None):
            raise _Invalid("annotations.title must be a string")
        for hint in HINT_KEYS:
            if annotations.get(hint) is not None and not isinstance(
                annotations[hint], bool
            ):
                raise _Invalid(f"annotations.{hint} must be a boolean")
    execution = _expect(entry, "execution", (dict,), "an object")
    if execution is not None and not isinstance(
        execution.get("taskSupport"), str | None
    ):
        raise _Invalid("execution.taskSupport must be a string")
    if entry.get("inputSchema") is None:
        raise _Invalid("inputSchema is missing")
    _check_schema(entry["inputSchema"], "inputSchema", limits, canonical)
    if entry.get("outputSchema") is not None:
        _check_schema(entry["outputSchema"], "outputSchema", limits, canonical)
    return EntrySpec(
        key=name,
        spec=entry,
        spec_hash=canonical.digest,
        effect_hint=effect_hint(annotations),
    )


def _prompt_spec(
    entry: dict[str, Any], canonical: _Canonical, limits: NormalizeLimits
) -> EntrySpec:
    name = _check_name(entry.get("name"))
    _check_common(entry, limits)
    arguments = _expect(entry, "arguments", (list,), "an array")
    for i, argument in enumerate(arguments or ()):
        if not isinstance(argument, Mapping) or not isinstance(
            argument.get("name"), str
        ):
            raise _Invalid(f"arguments[{i}] must be an object with a string name")
        if argument.get("required") is not None and not isinstance(
            argument["required"], bool
        ):
            raise _Invalid(f"arguments[{i}].required must be a boolean")
    return EntrySpec(key=name, spec=entry, spec_hash=canonical.digest)


def _resource_spec(
    entry: dict[str, Any], canonical: _Canonical, limits: NormalizeLimits
) -> EntrySpec:
    uri = entry.get("uri")
    if not isinstance(uri, str) or not uri:
        raise _Invalid("uri must be a non-empty string")
    if len(uri) > MAX_URI_LENGTH:
        raise _Invalid(f"uri is {len(uri)} characters long (limit {MAX_URI_LENGTH})")
    if not isinstance(entry.get("name"), str) or not entry["name"]:
        raise _Invalid("name must be a non-empty string")
    _check_common(entry, limits)
    _expect(entry, "mimeType", (str,), "a string")
    _expect(entry, "size", (int,), "an integer")
    _expect(entry, "annotations", (dict,), "an object")
    return EntrySpec(key=uri, spec=entry, spec_hash=canonical.digest)


def _check_schema(
    schema: Any, field: str, limits: NormalizeLimits, canonical: _Canonical
) -> None:
    if not isinstance(schema, Mapping):
        raise _Invalid(f"{field} must be an object schema, got {_json_type(schema)}")
    if schema.get("type") != "object":
        raise _Invalid(
            f'{field} is not an object schema (root "type" must be "object")'
        )
    # A schema's canonical text is part of the entry's, so an entry within the
    # limit has schemas within it; only a larger entry is measured field by field.
    if canonical.size > limits.max_schema_bytes:
        size = len(canonical_json(schema).encode("utf-8"))
        if size > limits.max_schema_bytes:
            raise _Invalid(
                f"{field} is {size:,} bytes (limit {limits.max_schema_bytes:,})"
            )
    problem = _schema_problem(schema)
    if problem:
        raise _Invalid(f"{field} is not valid JSON Schema: {problem}")


# Dialects we can check offline. jsonschema-rs would try to fetch an unknown
# `$schema` over the network, so anything else is refused up front.
KNOWN_DIALECTS = frozenset(
    uri + suffix
    for uri in (
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "http://json-schema.org/draft-07/schema",
        "http://json-schema.org/draft-06/schema",
        "http://json-schema.org/draft-04/schema",
    )
    for suffix in ("", "#")
)


def _schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why a schema fails its meta-schema (2020-12 unless `$schema` says otherwise).

    jsonschema-rs checks a schema in microseconds; the pure-Python validator
    took milliseconds per schema, which dominated a 10,000-tool refresh.
    """
    dialect = schema.get("$schema")
    if dialect is not None:
        if not isinstance(dialect, str):
            return "$schema must be a string"
        if dialect not in KNOWN_DIALECTS:
            return f"unknown $schema {dialect[:100]!r}"
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(str(p) for p in exc.instance_path) or "(root)"
        return f"{exc.message[:300]} at {where}"
    except (jsonschema_rs.ReferencingError, ValueError) as exc:
        return str(exc).splitlines()[0][:300]
    return None
