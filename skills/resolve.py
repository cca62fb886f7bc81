"""Flatten skills over their includes and judge them against a catalog (SPEC 8).

Pure functions over frozen dataclasses; nothing here imports Django, so the
rules are testable without a database. `skills.registry` loads the rows,
calls these, and writes the outcomes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

# Longest list of missing tools spelled out in an error message; the full
# list is kept beside it (`Outcome.missing`).
MESSAGE_NAMES = 20

OK = "ok"
FAILED = "failed"
SKIPPED = "skipped"


@dataclass(frozen=True)
class SkillNode:
    """A skill's current revision: its own tool references and includes."""

    name: str
    tools: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Flattened:
    """A skill's tool set, united over its includes at any depth.

    `errors` are structural: include cycles and missing includes anywhere
    below the skill. They make the skill fail whatever the catalog says.
    """

    tools: frozenset[str]
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class GatewayState:
    """What the registry needs to know about one gateway of the tenant."""

    id: int
    prefix: str
    # None: never read; False: the last read was incomplete.
    complete: bool | None


@dataclass(frozen=True)
class Outcome:
    """One skill's judged result."""

    status: str
    error: str = ""
    missing: tuple[str, ...] = ()
    resolved: tuple[str, ...] = ()


def _cycle_message(cycle: list[str]) -> str:
    """Name a cycle the same way wherever the walk entered it (smallest name first)."""
    ring = cycle[:-1]
    start = ring.index(min(ring))
    ring = ring[start:] + ring[:start]
    return "include cycle: " + " -> ".join([*ring, ring[0]])


def _own_errors(node: SkillNode, nodes: Mapping[str, SkillNode]) -> list[str]:
    return [
        f"missing include: {name} (included by {node.name})"
        for name in dict.fromkeys(node.includes)
        if name not in nodes
    ]


def _unique(messages: Iterable[str]) -> tuple[str, ...]:
    """Sorted and de-duplicated: the same skill reads the same whoever includes it."""
    return tuple(sorted(set(messages)))


def flatten(
    nodes: Mapping[str, SkillNode], roots: Iterable[str]
) -> dict[str, Flattened]:
    """Flatten every root (and everything it includes) over its includes.

    One iterative depth-first walk shared by all roots, so each skill is
    flattened once however many skills include it, and a long include chain
    cannot exhaust the Python stack. A skill whose walk met a skill still
    being walked (it sits on or above a cycle) is recomputed afterwards by
    plain reachability, so its tools and errors are complete as well.
    Roots absent from `nodes` are ignored.
    """
    done: dict[str, Flattened] = {}
    cycles: dict[str, set[str]] = {}
    tainted: set[str] = set()
    for root in roots:
        if root in done or root not in nodes:
            continue
        path = [root]
        on_path = {root: 0}
        children = [iter(nodes[root].includes)]
        while children:
            name = path[-1]
            child = next(children[-1], None)
            if child is not None:
                if child in done or child not in nodes:
                    continue
                if child in on_path:
                    cycle = [*path[on_path[child] :], child]
                    message = _cycle_message(cycle)
                    for member in cycle[:-1]:
                        cycles.setdefault(member, set()).add(message)
                    tainted.add(name)
                    continue
                on_path[child] = len(path)
                path.append(child)
                children.append(iter(nodes[child].includes))
                continue
            node = nodes[name]
            tools = set(node.tools)
            errors = sorted(cycles.get(name, ()))
            errors += _own_errors(node, nodes)
            for included in dict.fromkeys(node.includes):
                below = done.get(included)
                if below is not None:
                    tools |= below.tools
                    errors += below.errors
                    if included in tainted:
                        tainted.add(name)
                elif included in nodes:
                    # Still on the walk's path: part of a cycle.
                    tainted.add(name)
            done[name] = Flattened(frozenset(tools), _unique(errors))
            children.pop()
            path.pop()
            del on_path[name]
    for name in tainted:
        done[name] = _reachable(name, nodes, cycles)
    return done


def _reachable(
    name: str, nodes: Mapping[str, SkillNode], cycles: Mapping[str, set[str]]
) -> Flattened:
    seen: set[str] = set()
    tools: set[str] = set()
    errors: list[str] = []
    queue = [name]
    while queue:
        current = queue.pop()
        if current in seen or current not in nodes:
            continue
        seen.add(current)
        node = nodes[current]
        tools.update(node.tools)
        errors += sorted(cycles.get(current, ()))
        errors += _own_errors(node, nodes)
        queue.extend(node.includes)
    return Flattened(frozenset(tools), _unique(errors))


def reference_candidates(
    reference: str, gateways: Mapping[str, GatewayState], separator: str
) -> list[tuple[GatewayState, str]]:
    """Every (gateway, tool name) a qualified tool name can stand for.

    Prefixes may themselves contain the separator's characters, so
    `a__b__c` can be gateway `a`'s tool `b__c` or gateway `a__b`'s tool `c`;
    each split whose prefix is a gateway of the tenant is a candidate.
    """
    found: list[tuple[GatewayState, str]] = []
    at = reference.find(separator)
    while at > 0:
        gateway = gateways.get(reference[:at])
        tool = reference[at + len(separator) :]
        if gateway is not None and tool:
            found.append((gateway, tool))
        at = reference.find(separator, at + 1)
    return found


@dataclass(frozen=True)
class CatalogView:
    """What the catalog says about each referenced name, worked out once per refresh.

    `missing`: references absent from every gateway they can name, each of
    which was last read completely (or that name no gateway at all).
    `unsure`: references that depend on a gateway never read or last read
    incompletely, with those gateways; present or not, they prove nothing.
    """

    missing: frozenset[str] = frozenset()
    unsure: Mapping[str, tuple[GatewayState, ...]] = field(default_factory=dict)
    unsure_names: frozenset[str] = frozenset()


def catalog_view(
    references: Iterable[str],
    *,
    candidates: Mapping[str, list[tuple[GatewayState, str]]],
    active: Collection[tuple[int, str]],
) -> CatalogView:
    """Judge every distinct reference once against the active tools."""
    missing: set[str] = set()
    unsure: dict[str, tuple[GatewayState, ...]] = {}
    for reference in references:
        options = candidates.get(reference, [])
        doubtful = tuple(g for g, _ in options if g.complete is not True)
        if doubtful:
            unsure[reference] = doubtful
        elif not any((g.id, tool) in active for g, tool in options):
            missing.add(reference)
    return CatalogView(frozenset(missing), unsure, frozenset(unsure))


def judge(flat: Flattened, view: CatalogView) -> Outcome:
    """Validate a flattened skill against the catalog.

    `failed` when the include structure is broken or a reference is missing
    from a gateway whose last read was complete (or names no gateway);
    otherwise `skipped` when any reference depends on a gateway that was
    never read or whose last read was incomplete (neither presence nor
    absence proves anything there); otherwise `ok`.
    """
    resolved = tuple(sorted(flat.tools))
    missing = sorted(flat.tools & view.missing)
    errors = list(flat.errors)
    if missing:
        shown = ", ".join(missing[:MESSAGE_NAMES])
        more = len(missing) - MESSAGE_NAMES
        errors.append(
            f"missing tools: {shown}" + (f" and {more} more" if more > 0 else "")
        )
    if errors:
        return Outcome(FAILED, "; ".join(errors), tuple(missing), resolved)
    doubtful = flat.tools & view.unsure_names
    if doubtful:
        never_read = {
            g.prefix for r in doubtful for g in view.unsure[r] if g.complete is None
        }
        incomplete = {
            g.prefix for r in doubtful for g in view.unsure[r] if g.complete is False
        }
        reasons = [
            f"gateway {prefix} has never been read" for prefix in sorted(never_read)
        ] + [
            f"the last read of gateway {prefix} was incomplete"
            for prefix in sorted(incomplete)
        ]
        return Outcome(SKIPPED, "cannot conclude: " + "; ".join(reasons), (), resolved)
    return Outcome(OK, "", (), resolved)
