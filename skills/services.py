"""Every write to skills: create, new revision, delete, and the refresh after a catalog apply.

Writers lock in one order, which is what keeps a skill's recorded status true
while catalogs change underneath it:

1. the tenant's gateway rows `FOR KEY SHARE` (skill writes only; PostgreSQL).
   A catalog apply holds its gateway `FOR UPDATE`, so a skill write either
   runs wholly before an apply (whose skills step then sees the new revision)
   or after it (and reads the applied catalog), never between;
2. the skill rows it will record, in id order (`selectors.skill_ids_lock`),
   so two refreshes touching one skill queue instead of deadlocking and the
   later computes from what the earlier committed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction

from gateways.models import PREFIX_PATTERN, Gateway, Tenant
from skills import selectors
from skills.exceptions import SkillInvalid
from skills.models import SKILL_NAME_PATTERN, Skill, SkillReference, SkillRevision
from skills.registry import SkillRefreshResult, SkillRegistry
from tools.models import Tool

logger = logging.getLogger("toolsync.skills")

MAX_TOOLS = 1000
MAX_INCLUDES = 100
TOOL_NAME_PART = r"[A-Za-z0-9_.-]{1,128}"


def _tool_reference_pattern() -> re.Pattern[str]:
    # Built per call: the separator is a setting (tests override it).
    prefix = PREFIX_PATTERN.removeprefix("^").removesuffix("$")
    separator = re.escape(settings.TOOLSYNC_TOOL_SEPARATOR)
    return re.compile(f"^{prefix}{separator}{TOOL_NAME_PART}$")


def _check_list(
    value: Any,
    *,
    field: str,
    pattern: re.Pattern[str],
    what: str,
    limit: int,
    errors: dict[str, list[str]],
) -> list[Any]:
    """Check one list field; problems go to `errors` under `field` or `field.<index>`."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        errors[field] = [f"Expected a list of {what}s."]
        return []
    value = list(value)
    if len(value) > limit:
        errors[field] = [f"At most {limit} {what}s per revision (got {len(value)})."]
        return value
    seen: set[str] = set()
    for index, item in enumerate(value):
        if not isinstance(item, str):
            problem = "Expected a string."
        elif not pattern.fullmatch(item):
            problem = f"{item[:300]!r} is not a valid {what}."
        elif item in seen:
            problem = f"{item!r} is listed twice."
        else:
            seen.add(item)
            continue
        errors[f"{field}.{index}"] = [problem]
    return value


def skill_content_validate(
    *, name: str, tools: Any, includes: Any
) -> tuple[list[str], list[str]]:
    """Check a skill's name and revision content; raises SkillInvalid with field paths.

    Tool references are qualified tool names of the tenant
    (`<prefix><separator><tool name>`); includes are skill names. A name that
    refers to nothing yet is allowed (the skill then fails until it exists);
    a malformed or repeated one, or the skill including itself, is not.
    """
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not re.fullmatch(SKILL_NAME_PATTERN, name):
        errors["name"] = [
            "Use namespace/name: lower-case letters, digits, '_', '.' or '-' "
            "(at most 64 + 128 characters)."
        ]
    tool_list = _check_list(
        tools,
        field="tools",
        pattern=_tool_reference_pattern(),
        what="qualified tool name",
        limit=MAX_TOOLS,
        errors=errors,
    )
    include_list = _check_list(
        includes,
        field="includes",
        pattern=re.compile(SKILL_NAME_PATTERN),
        what="skill name",
        limit=MAX_INCLUDES,
        errors=errors,
    )
    if isinstance(name, str) and name in include_list:
        index = include_list.index(name)
        errors[f"includes.{index}"] = ["A skill cannot include itself."]
    if errors:
        raise SkillInvalid("the skill is not valid", details=errors)
    return tool_list, include_list


def _hold_tenant_catalogs(tenant_id: int) -> None:
    """Share-lock the tenant's gateways so no catalog apply runs during a skill write.

    FOR KEY SHARE conflicts with the apply's FOR UPDATE but not with plain
    UPDATEs (health checks, lease bookkeeping), which keep running.
    """
    if connection.vendor != "postgresql":
        return  # SQLite serialises writing transactions anyway.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {Gateway._meta.db_table} WHERE tenant_id = %s "
            "ORDER BY id FOR KEY SHARE",
            [tenant_id],
        )


def _revision_write(
    *,
    skill: Skill,
    number: int,
    tools: Sequence[str],
    includes: Sequence[str],
    author: AbstractBaseUser | None,
) -> SkillRevision:
    revision = SkillRevision.objects.create(
        skill=skill,
        number=number,
        tools=list(tools),
        includes=list(includes),
        author=author if author is not None and author.is_authenticated else None,
    )
    SkillReference.objects.bulk_create(
        [
            SkillReference(
                tenant_id=skill.tenant_id,
                skill=skill,
                revision=revision,
                kind=kind,
                target=target,
            )
            for kind, targets in (
                (SkillReference.Kind.TOOL, tools),
                (SkillReference.Kind.INCLUDE, includes),
            )
            for target in targets
        ]
    )
    Skill.objects.filter(pk=skill.pk).update(current_revision=revision)
    skill.current_revision = revision
    return revision


def skill_create(
    *,
    tenant: Tenant,
    name: str,
    tools: Iterable[str] = (),
    includes: Iterable[str] = (),
    author: AbstractBaseUser | None = None,
) -> Skill:
    """Register a skill at revision 1 and compute its status (and its includers')."""
    tool_list, include_list = skill_content_validate(
        name=name, tools=tools, includes=includes
    )
    with transaction.atomic():
        _hold_tenant_catalogs(tenant.pk)
        try:
            # A savepoint: a concurrent create of the same name fails here
            # on the unique constraint, and the error is a clear one.
            with transaction.atomic():
                skill = Skill.objects.create(tenant=tenant, name=name)
        except IntegrityError as exc:
            raise SkillInvalid(
                f"a skill named {name!r} already exists",
                details={"name": ["A skill with this name already exists."]},
            ) from exc
        _revision_write(
            skill=skill, number=1, tools=tool_list, includes=include_list, author=author
        )
        # Skills that already include this name were failing on a missing
        # include; they are recomputed with it.
        affected = {
            skill.pk,
            *selectors.skill_ids_including(tenant_id=tenant.pk, names=[name]),
        }
        SkillRegistry(tenant=tenant).refresh_ids(affected, scope=f"{name} created")
    skill.refresh_from_db()
    return skill


def skill_revision_create(
    *,
    skill: Skill,
    tools: Iterable[str],
    includes: Iterable[str] = (),
    author: AbstractBaseUser | None = None,
) -> tuple[Skill, bool]:
    """Add a revision (n+1) and recompute the skill and every skill including it.

    Returns the skill and whether a revision was written: content equal to
    the current revision's writes nothing.
    """
    tool_list, include_list = skill_content_validate(
        name=skill.name, tools=tools, includes=includes
    )
    with transaction.atomic():
        _hold_tenant_catalogs(skill.tenant_id)
        affected = {
            skill.pk,
            *selectors.skill_ids_including(
                tenant_id=skill.tenant_id, names=[skill.name]
            ),
        }
        # The row lock serialises concurrent revisions of one skill, so the
        # numbers stay gap-free and unique (the trigger and constraint check).
        selectors.skill_ids_lock(tenant_id=skill.tenant_id, ids=affected)
        current = Skill.objects.select_related("current_revision").get(pk=skill.pk)
        revision = current.current_revision
        if (
            revision is not None
            and list(revision.tools) == tool_list
            and list(revision.includes) == include_list
        ):
            return current, False
        _revision_write(
            skill=current,
            number=current.revision_number + 1,
            tools=tool_list,
            includes=include_list,
            author=author,
        )
        SkillRegistry(tenant=skill.tenant_id).refresh_ids(
            affected, scope=f"{skill.name} revised"
        )
    current.refresh_from_db()
    return current, True


def skill_delete(*, skill: Skill) -> None:
    """Delete a skill with its revisions; skills that included it are recomputed (and fail)."""
    with transaction.atomic():
        _hold_tenant_catalogs(skill.tenant_id)
        includers = selectors.skill_ids_including(
            tenant_id=skill.tenant_id, names=[skill.name]
        )
        includers.pop(skill.pk, None)
        selectors.skill_ids_lock(tenant_id=skill.tenant_id, ids={skill.pk, *includers})
        Skill.objects.filter(pk=skill.pk).delete()
        SkillRegistry(tenant=skill.tenant_id).refresh_ids(
            includers, scope=f"{skill.name} deleted"
        )


def skills_refresh_for_gateway(
    *, gateway: Gateway, run_id: int | None
) -> dict[str, Any]:
    """Refresh the skills that name `gateway`'s tools (directly or through includes).

    Called by the refresh engine at the end of every applied catalog
    refresh, inside its transaction with the gateway locked; the returned
    dict is the report's `skills` section. It runs in a savepoint: should it
    fail, the catalog apply still lands, the skills keep their last status
    and the section says what went wrong.
    """
    try:
        with transaction.atomic():
            direct = selectors.skill_ids_naming_gateway(gateway=gateway)
            if not direct:
                return SkillRefreshResult().to_dict()
            affected = {
                **direct,
                **selectors.skill_ids_including(
                    tenant_id=gateway.tenant_id, names=list(direct.values())
                ),
            }
            result = SkillRegistry(tenant=gateway.tenant_id).refresh_ids(
                affected, run_id=run_id, scope=f"gateway {gateway.prefix}, run {run_id}"
            )
    except Exception as exc:
        logger.exception(
            "skills refresh after run %s of gateway %s failed", run_id, gateway.pk
        )
        section = SkillRefreshResult().to_dict()
        section["error"] = f"the skills could not be refreshed: {type(exc).__name__}"
        return section
    return result.to_dict()


DEMO_SKILL = "demo/starter"


def demo_skill_ensure(*, gateway: Gateway) -> Skill | None:
    """The demo's skill (`make run`): two of the gateway's active tools, created once.

    Returns the existing skill if there is one, None when the gateway has
    fewer than two active tools.
    """
    existing = Skill.objects.filter(
        tenant_id=gateway.tenant_id, name=DEMO_SKILL
    ).first()
    if existing is not None:
        return existing
    names = list(
        Tool.objects.filter(gateway=gateway, active=True)
        .order_by("name")
        .values_list("name", flat=True)[:2]
    )
    if len(names) < 2:
        return None
    try:
        return skill_create(
            tenant=gateway.tenant,
            name=DEMO_SKILL,
            tools=[selectors.qualified_tool_name(gateway.prefix, n) for n in names],
        )
    except SkillInvalid:
        # Created meanwhile by another process: use theirs.
        return Skill.objects.get(tenant_id=gateway.tenant_id, name=DEMO_SKILL)
