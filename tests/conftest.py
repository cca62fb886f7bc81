"""Shared fixtures: tenants, users, gateways, a fake probe, PostgreSQL gating."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from refresh.probe import Listing, ProbeResult
from tests import factories
from tests.browser import page, screenshot  # noqa: F401 - browser tests' fixtures


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    is_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    if is_postgres:
        return
    for item in items:
        if item.get_closest_marker("postgres") is None:
            continue
        if settings.TOOLSYNC_REQUIRE_POSTGRES:
            item.add_marker(
                pytest.mark.xfail(
                    reason="TOOLSYNC_REQUIRE_POSTGRES is set but the database is not PostgreSQL",
                    strict=True,
                    run=False,
                )
            )
        else:
            item.add_marker(
                pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL)")
            )


@pytest.fixture(scope="session", autouse=True)
def _postgres_required_means_postgres(
    django_db_setup: Any, django_db_blocker: Any
) -> None:
    """With TOOLSYNC_REQUIRE_POSTGRES the whole run fails loudly on another database."""
    if settings.TOOLSYNC_REQUIRE_POSTGRES:
        with django_db_blocker.unblock():
            assert connection.vendor == "postgresql", (
                "TOOLSYNC_REQUIRE_POSTGRES=1 but DATABASE_URL does not point at PostgreSQL"
            )


@pytest.fixture
def tenant(db: Any) -> Any:
    return factories.TenantFactory()


@pytest.fixture
def gateway(tenant: Any) -> Any:
    return factories.GatewayFactory(tenant=tenant)


@pytest.fixture
def probe_result() -> Callable[..., ProbeResult]:
    """Build a ProbeResult from raw tool dicts (the wire form)."""

    def build(
        tools: Iterable[Any],
        *,
        complete: bool = True,
        reason: str | None = None,
        prompts: Iterable[Any] | None = None,
        resources: Iterable[Any] | None = None,
    ) -> ProbeResult:
        return ProbeResult(
            protocol_version="2025-11-25",
            era="legacy",
            capabilities={"tools": {"listChanged": True}},
            server_info={"name": "fake", "version": "1"},
            tools=Listing(
                entries=tuple(tools),
                complete=complete,
                incomplete_reason=None if complete else (reason or "max pages reached"),
                pages=1,
            ),
            prompts=Listing(entries=tuple(prompts), complete=True)
            if prompts is not None
            else None,
            resources=(
                Listing(entries=tuple(resources), complete=True)
                if resources is not None
                else None
            ),
        )

    return build


@pytest.fixture
def fake_probe(
    monkeypatch: pytest.MonkeyPatch, probe_result: Callable[..., ProbeResult]
) -> Any:
    """Replace the network probe; set `.result` (a ProbeResult) or `.error`."""

    class FakeProbe:
        result: ProbeResult | None = None
        error: Exception | None = None
        calls: list[Any] = []

        def set_tools(self, tools: Iterable[Any], **kw: Any) -> None:
            self.result = probe_result(list(tools), **kw)

        def __call__(self, target: Any, limits: Any, **kw: Any) -> ProbeResult:
            self.calls.append((target, kw))
            if self.error is not None:
                raise self.error
            assert self.result is not None, "fake_probe.set_tools(...) first"
            return self.result

    fake = FakeProbe()
    fake.calls = []
    monkeypatch.setattr("refresh.services.probe_gateway", fake)
    return fake
