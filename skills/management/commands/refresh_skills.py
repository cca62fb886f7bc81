"""`manage.py refresh_skills [--tenant SLUG] [--name NAME] [--json]`: re-validate skills."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateways.models import Tenant
from skills.exceptions import SkillNotFound
from skills.registry import SkillRefreshResult, SkillRegistry


class Command(BaseCommand):
    help = (
        "Recompute and validate skills: one by name (needs --tenant), or every "
        "skill of one tenant or of all tenants. Exits 1 when any skill failed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="tenant slug (default: every tenant)")
        parser.add_argument("--name", help="one skill, namespace/name")
        parser.add_argument(
            "--json", action="store_true", help="print the result as JSON"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        tenants = Tenant.objects.order_by("slug")
        if opts["tenant"]:
            tenants = tenants.filter(slug=opts["tenant"])
            if not tenants.exists():
                raise CommandError(f"no tenant {opts['tenant']!r}")
        elif opts["name"]:
            raise CommandError("--name needs --tenant")
        results: dict[str, SkillRefreshResult] = {}
        for tenant in tenants:
            registry = SkillRegistry(tenant=tenant)
            try:
                results[tenant.slug] = (
                    registry.refresh(opts["name"])
                    if opts["name"]
                    else registry.refresh_all()
                )
            except SkillNotFound as exc:
                raise CommandError(f"{exc.code}: {exc.message}") from exc
        if opts["json"]:
            self.stdout.write(
                json.dumps({slug: r.to_dict() for slug, r in results.items()}, indent=2)
            )
        else:
            for slug, result in results.items():
                self.stdout.write(f"{slug}: {result.to_summary()}")
                for name, why in result.failed.items():
                    self.stdout.write(f"  failed {name}: {why}")
                for name in result.skipped:
                    self.stdout.write(f"  skipped {name}")
        if any(r.total_failed for r in results.values()):
            raise SystemExit(1)
