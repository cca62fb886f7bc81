"""Fixtures for the skills tests: gateways with tools, and a skill builder."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from skills.models import Skill
from skills.services import skill_create
from tests import factories


@pytest.fixture
def catalog(tenant: Any) -> Callable[..., Any]:
    """Make a gateway of `tenant` with active tools; `complete` is its last read."""

    def build(
        prefix: str,
        tools: Iterable[str] = (),
        *,
        complete: bool | None = True,
        inactive: Iterable[str] = (),
        tenant_: Any = None,
    ) -> Any:
        gateway = factories.GatewayFactory(
            tenant=tenant_ or tenant, prefix=prefix, last_catalog_complete=complete
        )
        for name in tools:
            factories.ToolFactory(gateway=gateway, name=name)
        for name in inactive:
            from django.utils import timezone

            factories.ToolFactory(
                gateway=gateway,
                name=name,
                active=False,
                deactivated_at=timezone.now(),
            )
        return gateway

    return build


@pytest.fixture
def make_skill(tenant: Any) -> Callable[..., Skill]:
    def build(
        name: str,
        tools: Iterable[str] = (),
        includes: Iterable[str] = (),
        *,
        tenant_: Any = None,
    ) -> Skill:
        return skill_create(
            tenant=tenant_ or tenant, name=name, tools=tools, includes=includes
        )

    return build
