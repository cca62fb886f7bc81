"""Seams between the refresh engine and the parts built around it.

Skills (SPEC 8) and the task queue (SPEC 5) plug in here, so the engine does
not import them directly and stays testable alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.apps import apps


def skill_references(
    *, gateway: Any, names: Sequence[str]
) -> Mapping[str, Sequence[str]]:
    """For each tool name, the skill revisions that still name it."""
    if not apps.is_installed("skills"):
        return {}
    from skills.selectors import skill_revisions_naming

    return skill_revisions_naming(gateway=gateway, tool_names=names)


def after_apply(*, gateway: Any, run_id: int, changed: bool) -> dict[str, Any] | None:
    """Refresh the skills that name the gateway's tools; their result joins the report."""
    if not apps.is_installed("skills"):
        return None
    from skills.services import skills_refresh_for_gateway

    return skills_refresh_for_gateway(gateway=gateway, run_id=run_id)


def enqueue_run(run_id: int) -> None:
    """Hand a queued run to a Celery worker."""
    from refresh.tasks import execute_run_task

    execute_run_task.delay(run_id)
