"""Deterministic, realistic MCP tool, prompt and resource dicts in wire form.

Pure data: no MCP imports. Entry `i` is generated from its own RNG seeded by
`(seed, i)`, so `generate_tools(10)` is a prefix of `generate_tools(20)`.
"""

from __future__ import annotations

import copy
import random
from typing import Any

__all__ = ["MIME_TYPES", "generate_prompts", "generate_resources", "generate_tools"]

_DOMAINS: dict[str, list[str]] = {
    "crm": ["contacts", "accounts", "leads", "deals", "notes"],
    "billing": ["invoices", "payments", "refunds", "subscriptions", "credits"],
    "github": ["issues", "pull_requests", "releases", "workflows", "branches"],
    "jira": ["tickets", "sprints", "boards", "epics", "comments"],
    "slack": ["messages", "channels", "threads", "reactions", "users"],
    "calendar": ["events", "invites", "rooms", "availability", "reminders"],
    "drive": ["files", "folders", "permissions", "revisions", "shares"],
    "analytics": ["reports", "metrics", "dashboards", "funnels", "cohorts"],
    "devops": ["deployments", "incidents", "alerts", "pipelines", "hosts"],
    "hr": ["employees", "timeoff", "payroll", "reviews", "positions"],
    "inventory": ["items", "warehouses", "shipments", "suppliers", "orders"],
    "mail": ["emails", "drafts", "labels", "attachments", "filters"],
    "k8s": ["pods", "services", "namespaces", "configmaps", "jobs"],
    "db": ["tables", "rows", "queries", "indexes", "backups"],
}
_VERBS: dict[str, tuple[bool, bool, bool]] = {
    # verb: (read_only, destructive, idempotent)
    "search": (True, False, True),
    "list": (True, False, True),
    "get": (True, False, True),
    "export": (True, False, True),
    "create": (False, False, False),
    "update": (False, False, True),
    "archive": (False, False, True),
    "delete": (False, True, True),
    "sync": (False, False, False),
    "notify": (False, False, False),
}
_SENTENCES = [
    "Results are paginated and sorted by most recent activity first.",
    "Requires an API token with the appropriate scope.",
    "Use this when the user asks about {noun} in {domain}.",
    "Returns at most `limit` records; pass the returned cursor to continue.",
    "Timestamps are ISO 8601 strings in UTC.",
    "Archived {noun} are excluded unless `include_archived` is true.",
    "This operation is rate limited to 60 calls per minute per workspace.",
    "Field names follow the upstream {domain} API.",
    "Prefer the search variant for free-text lookups.",
    "Large responses are truncated; request specific `fields` to reduce size.",
    "Changes are visible to other users immediately.",
    "The caller must have write access to the target {noun}.",
]
_PROPERTIES: list[tuple[str, dict[str, Any]]] = [
    ("query", {"type": "string", "description": "Free-text search query."}),
    (
        "limit",
        {
            "type": "integer",
            "description": "Maximum number of results.",
            "minimum": 1,
            "maximum": 500,
            "default": 50,
        },
    ),
    ("id", {"type": "string", "description": "Identifier of the record."}),
    ("email", {"type": "string", "format": "email", "description": "Email address."}),
    (
        "status",
        {
            "type": "string",
            "enum": ["open", "pending", "closed", "archived"],
            "description": "Filter by status.",
        },
    ),
    (
        "tags",
        {
            "type": "array",
            "items": {"type": "string"},
            "description": "Tags to match (any).",
        },
    ),
    (
        "since",
        {
            "type": "string",
            "format": "date-time",
            "description": "Only records changed after this time.",
        },
    ),
    (
        "include_archived",
        {
            "type": "boolean",
            "description": "Include archived records.",
            "default": False,
        },
    ),
    (
        "sort",
        {
            "type": "string",
            "enum": ["created", "updated", "name", "relevance"],
            "description": "Sort order.",
        },
    ),
    (
        "amount",
        {"type": "number", "description": "Amount in minor units.", "minimum": 0},
    ),
    (
        "filters",
        {
            "type": "object",
            "description": "Structured filters.",
            "properties": {
                "owner": {"type": "string", "description": "Owner user id."},
                "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            },
            "additionalProperties": False,
        },
    ),
    (
        "fields",
        {
            "type": "array",
            "items": {"type": "string"},
            "description": "Fields to return.",
            "uniqueItems": True,
        },
    ),
    ("dry_run", {"type": "boolean", "description": "Validate without applying."}),
    (
        "items",
        {
            "type": "array",
            "description": "Line items.",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "quantity": {"type": "integer", "minimum": 1},
                },
                "required": ["sku"],
            },
        },
    ),
]
MIME_TYPES = ["application/json", "text/plain", "text/markdown", "text/csv"]


def _words(identifier: str) -> str:
    return identifier.replace("_", " ")


def _sentences(rng: random.Random, domain: str, noun: str, count: int) -> str:
    picked = rng.sample(_SENTENCES, k=min(count, len(_SENTENCES)))
    return " ".join(s.format(domain=domain, noun=_words(noun)) for s in picked)


def _pick_topic(rng: random.Random) -> tuple[str, str]:
    domain = rng.choice(sorted(_DOMAINS))
    return domain, rng.choice(_DOMAINS[domain])


def _tool(index: int, seed: int) -> dict[str, Any]:
    # One RNG per index keeps tool i identical whatever n is asked for.
    rng = random.Random(f"tool:{seed}:{index}")
    domain, noun = _pick_topic(rng)
    verb = rng.choice(sorted(_VERBS))
    read_only, destructive, idempotent = _VERBS[verb]
    title = f"{verb.capitalize()} {_words(noun)}"
    lead = f"{verb.capitalize()} {_words(noun)} in {domain}."
    description = f"{lead} {_sentences(rng, domain, noun, rng.randint(1, 5))}"
    props = rng.sample(_PROPERTIES, k=rng.randint(1, 6))
    properties = {name: copy.deepcopy(schema) for name, schema in props}
    required = sorted(
        rng.sample(list(properties), k=rng.randint(0, min(2, len(props))))
    )
    input_schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        input_schema["required"] = required
    if rng.random() < 0.3:
        input_schema["additionalProperties"] = False
    tool: dict[str, Any] = {
        "name": f"{domain}.{verb}_{noun}_{index:04d}",
        "title": title,
        "description": description,
        "inputSchema": input_schema,
    }
    if rng.random() < 0.3:
        tool["outputSchema"] = {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"type": "object"}},
                "total": {"type": "integer", "minimum": 0},
                "nextCursor": {"type": "string"},
            },
            "required": ["items"],
        }
    annotations: dict[str, Any] = {"title": title, "readOnlyHint": read_only}
    if not read_only:
        annotations["destructiveHint"] = destructive
    if rng.random() < 0.7:
        annotations["idempotentHint"] = idempotent
    if rng.random() < 0.6:
        annotations["openWorldHint"] = rng.random() < 0.5
    tool["annotations"] = annotations
    if rng.random() < 0.2:
        tool["icons"] = [
            {
                "src": "https://example.com/i.png",
                "mimeType": "image/png",
                "sizes": ["48x48"],
            }
        ]
    if rng.random() < 0.15:
        tool["_meta"] = {"com.example/domain": domain, "com.example/revision": 1}
    return tool


def generate_tools(n: int, seed: int = 0, *, start: int = 0) -> list[dict[str, Any]]:
    """Return `n` deterministic, spec-valid MCP tool dicts in wire form.

    Names embed the index (`crm.search_contacts_0042`), so tools generated
    with distinct index ranges (`start`) never collide.
    """
    return [_tool(i, seed) for i in range(start, start + n)]


def _prompt(index: int, seed: int) -> dict[str, Any]:
    rng = random.Random(f"prompt:{seed}:{index}")
    domain, noun = _pick_topic(rng)
    arg_names = rng.sample(
        ["topic", "audience", "tone", "length", "language", "id"], k=3
    )
    arguments = [
        {
            "name": name,
            "description": f"The {name} to use.",
            "required": i == 0,
        }
        for i, name in enumerate(arg_names[: rng.randint(0, 3)])
    ]
    prompt: dict[str, Any] = {
        "name": f"{domain}.summarize_{noun}_{index:04d}",
        "title": f"Summarize {_words(noun)}",
        "description": f"Summarize {domain} {_words(noun)}. "
        + _sentences(rng, domain, noun, rng.randint(0, 2)),
    }
    if arguments:
        prompt["arguments"] = arguments
    return prompt


def generate_prompts(n: int, seed: int = 0, *, start: int = 0) -> list[dict[str, Any]]:
    """Return `n` deterministic, spec-valid MCP prompt dicts in wire form."""
    return [_prompt(i, seed) for i in range(start, start + n)]


def _resource(index: int, seed: int) -> dict[str, Any]:
    rng = random.Random(f"resource:{seed}:{index}")
    domain, noun = _pick_topic(rng)
    mime = rng.choice(MIME_TYPES)
    ext = {"application/json": "json", "text/plain": "txt", "text/markdown": "md"}.get(
        mime, "csv"
    )
    return {
        "uri": f"file:///{domain}/{noun}/{index:04d}.{ext}",
        "name": f"{domain}_{noun}_{index:04d}",
        "title": f"{domain} {_words(noun)} #{index}",
        "description": f"Export of {domain} {_words(noun)}. "
        + _sentences(rng, domain, noun, rng.randint(0, 2)),
        "mimeType": mime,
    }


def generate_resources(
    n: int, seed: int = 0, *, start: int = 0
) -> list[dict[str, Any]]:
    """Return `n` deterministic, spec-valid MCP resource dicts in wire form."""
    return [_resource(i, seed) for i in range(start, start + n)]
