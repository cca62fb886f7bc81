"""One skills benchmark size, in its own process (so peak RSS is its own).

`python -m bench.skills_worker SKILLS TOOLS` prints one JSON object with the
figures. Expects DATABASE_URL to point at an empty, migrated database.

The tenant has TOOLS tools over 10 gateways (one of them last read
incomplete). Skills come in six layers: layer 0 names five tools each, and
each skill of layer k (1..5) names two tools and includes two skills of layer
k-1, so the deepest skills flatten through five levels of includes. About 2 %
of the tool references name tools that do not exist.
"""

from __future__ import annotations

import json
import random
import resource
import statistics
import sys
import time

from bench.__main__ import _setup_django

GATEWAYS = 10
# Share of the skills in each layer, leaves first (depth 0..5).
LAYERS = (0.5, 0.2, 0.12, 0.08, 0.06, 0.04)


def build(n_skills: int, n_tools: int) -> tuple[object, list[object]]:
    from django.db import transaction

    from gateways.models import Gateway
    from gateways.services import tenant_get_or_create
    from refresh.normalize import spec_hash
    from skills.models import Skill, SkillReference, SkillRevision
    from tools.models import Tool

    rng = random.Random(7)
    tenant = tenant_get_or_create(slug=f"bench-skills-{n_skills}")
    with transaction.atomic():
        gateways = Gateway.objects.bulk_create(
            Gateway(
                tenant=tenant,
                name=f"g{i}",
                prefix=f"g{i}",
                url="http://127.0.0.1:9/mcp",
                last_catalog_complete=(i != GATEWAYS - 1),
            )
            for i in range(GATEWAYS)
        )
        per = n_tools // GATEWAYS
        tools = [
            Tool(
                gateway=g,
                name=f"tool_{j:05d}",
                input_schema={"type": "object"},
                spec_hash=spec_hash({"name": f"tool_{j:05d}"}),
            )
            for g in gateways
            for j in range(per)
        ]
        Tool.objects.bulk_create(tools, batch_size=5000)

        def ref(complete_only: bool = True) -> str:
            g = rng.randrange(GATEWAYS - 1 if complete_only else GATEWAYS)
            j = rng.randrange(per) if rng.random() > 0.02 else per + rng.randrange(99)
            return f"g{g}__tool_{j:05d}"

        layers: list[list[str]] = []
        specs: list[tuple[str, list[str], list[str]]] = []
        for depth, share in enumerate(LAYERS):
            size = max(1, int(n_skills * share))
            names = [f"d{depth}/s{i:05d}" for i in range(size)]
            for name in names:
                if depth == 0:
                    # One leaf in 50 names the incomplete gateway: skipped.
                    own = [ref(complete_only=rng.random() > 0.02) for _ in range(5)]
                    specs.append((name, sorted(set(own)), []))
                else:
                    below = layers[depth - 1]
                    includes = sorted({rng.choice(below), rng.choice(below)})
                    own = sorted({ref(), ref()})
                    specs.append((name, own, includes))
            layers.append(names)
        skills = Skill.objects.bulk_create(
            (Skill(tenant=tenant, name=name) for name, _, _ in specs), batch_size=5000
        )
        revisions = SkillRevision.objects.bulk_create(
            (
                SkillRevision(skill=skill, number=1, tools=own, includes=includes)
                for skill, (_, own, includes) in zip(skills, specs, strict=True)
            ),
            batch_size=5000,
        )
        SkillReference.objects.bulk_create(
            (
                SkillReference(
                    tenant=tenant, skill=skill, revision=rev, kind=kind, target=target
                )
                for skill, rev, (_, own, includes) in zip(
                    skills, revisions, specs, strict=True
                )
                for kind, targets in (("tool", own), ("include", includes))
                for target in targets
            ),
            batch_size=5000,
        )
        for skill, rev in zip(skills, revisions, strict=True):
            skill.current_revision = rev
        Skill.objects.bulk_update(skills, ["current_revision"], batch_size=5000)
    return tenant, gateways


def main() -> None:
    n_skills, n_tools = int(sys.argv[1]), int(sys.argv[2])
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    _setup_django()
    import logging

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from gateways.models import Gateway
    from skills.models import Skill
    from skills.registry import SkillRegistry
    from skills.selectors import skill_revisions_naming
    from skills.services import skills_refresh_for_gateway
    from tools.models import Tool

    logging.getLogger("toolsync.skills").setLevel(logging.WARNING)
    started = time.perf_counter()
    tenant, gateways = build(n_skills, n_tools)
    setup_s = time.perf_counter() - started
    registry = SkillRegistry(tenant=tenant)

    def timed(fn):  # type: ignore[no-untyped-def]
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            value = fn()
            elapsed = time.perf_counter() - start
        return elapsed, len(queries.captured_queries), value

    def reset() -> None:
        Skill.objects.filter(tenant=tenant).update(
            status="unknown", resolved_tools=[], outcome_digest=""
        )

    first = []
    for _ in range(repeats):
        reset()
        first.append(timed(registry.refresh_all))
    repeat = [timed(registry.refresh_all) for _ in range(repeats)]
    # 1 % of the tools vanish (deactivated): every skill naming one now fails.
    victims = list(
        Tool.objects.filter(gateway__tenant=tenant)
        .order_by("?")
        .values_list("pk", flat=True)[: n_tools // 100]
    )
    Tool.objects.filter(pk__in=victims).update(
        active=False, deactivated_at=timezone.now()
    )
    changed = timed(registry.refresh_all)
    Tool.objects.filter(pk__in=victims).update(active=True, deactivated_at=None)
    registry.refresh_all()

    # The skills step of one gateway's applied refresh (the engine's seam).
    gateway = Gateway.objects.get(pk=gateways[0].pk)
    hook = [
        timed(lambda: skills_refresh_for_gateway(gateway=gateway, run_id=None))
        for _ in range(repeats)
    ]
    names = list(
        Tool.objects.filter(gateway=gateway).values_list("name", flat=True)[:500]
    )
    naming = [
        timed(lambda: skill_revisions_naming(gateway=gateway, tool_names=names))
        for _ in range(repeats)
    ]
    result = first[-1][2]
    print(
        json.dumps(
            {
                "skills": n_skills,
                "tools": n_tools,
                "setup_s": setup_s,
                "first_s": statistics.median(t for t, _, _ in first),
                "first_queries": first[-1][1],
                "repeat_s": statistics.median(t for t, _, _ in repeat),
                "repeat_queries": repeat[-1][1],
                "changed_s": changed[0],
                "changed_queries": changed[1],
                "changed_summary": changed[2].to_summary(),
                "summary": result.to_summary(),
                "hook_s": statistics.median(t for t, _, _ in hook),
                "hook_queries": hook[-1][1],
                "hook_summary": hook[-1][2]["summary"],
                "naming_s": statistics.median(t for t, _, _ in naming),
                "naming_queries": naming[-1][1],
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                / 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
